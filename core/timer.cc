#include "core/timer.hh"

namespace shoal {

namespace {
/// A one-shot timer that resolves a promise and frees itself; with an abort_source, an abort
/// cancels it and fails the promise with the abort's reason.
class sleeper final : public timer_base {
public:
    explicit sleeper(steady_clock_type::time_point when, abort_source* as = nullptr) {
        if (as) {
            _sub = as->subscribe([this](const std::exception_ptr& ex) { aborted(ex); });
        }
        _expiry = when;
        local_reactor().add_timer(this);
    }
    future<> get_future() { return _pr.get_future(); }

private:
    void expire() noexcept override {
        _pr.set_value();
        delete this; // unsubscribes
    }
    void aborted(const std::exception_ptr& ex) noexcept {
        local_reactor().del_timer(this);
        _pr.set_exception(ex);
        delete this;
    }
    promise<> _pr;
    abort_source::subscription _sub;
};
} // namespace

future<> sleep_abortable(steady_clock_type::duration d, abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<>(as.abort_exception());
    }
    auto* s = new sleeper(steady_clock_type::now() + d, &as);
    return s->get_future();
}

future<> sleep(steady_clock_type::duration d) {
    auto* s = new sleeper(steady_clock_type::now() + d);
    return s->get_future();
}

future<> sleep_lowres(lowres_clock::duration d) {
    auto* s = new sleeper(lowres_clock::to_steady(lowres_clock::now() + d));
    return s->get_future();
}

} // namespace shoal
