#include "core/future_util.hh"

namespace shoal {

namespace {
/// A task that resolves a promise when the reactor reaches it in its queue.
class yield_task final : public task {
public:
    future<> get_future() { return _pr.get_future(); }
    void run_and_dispose() noexcept override {
        _pr.set_value();
        delete this;
    }

private:
    promise<> _pr;
};
} // namespace

future<> yield() noexcept {
    auto* t = new (std::nothrow) yield_task();
    if (!t) {
        return make_exception_future<>(std::make_exception_ptr(std::bad_alloc()));
    }
    auto f = t->get_future();
    schedule(t);
    return f;
}

} // namespace shoal
