#include "core/timer.hh"

namespace shoal {

namespace {
/// A one-shot timer that resolves a promise and frees itself.
class sleeper final : public timer_base {
public:
    explicit sleeper(steady_clock_type::time_point when) {
        _expiry = when;
        local_reactor().add_timer(this);
    }
    future<> get_future() { return _pr.get_future(); }

private:
    void expire() noexcept override {
        _pr.set_value();
        delete this;
    }
    promise<> _pr;
};
} // namespace

future<> sleep(steady_clock_type::duration d) {
    auto* s = new sleeper(steady_clock_type::now() + d);
    return s->get_future();
}

future<> sleep_lowres(lowres_clock::duration d) {
    auto* s = new sleeper(lowres_clock::to_steady(lowres_clock::now() + d));
    return s->get_future();
}

} // namespace shoal
