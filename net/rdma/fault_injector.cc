#include "net/rdma/fault_injector.hh"

namespace shoal::net::rdma {

constinit thread_local fault_injector internal::tl_fault_injector;

void fault_injector::arm(fault f, unsigned skip, unsigned times) noexcept {
    point& p = _points[unsigned(f)];
    p.skip = skip;
    p.remaining = times;
    _armed = _armed || times > 0;
}

void fault_injector::disarm() noexcept {
    for (point& p : _points) {
        p.skip = 0;
        p.remaining = 0;
    }
    _armed = false;
}

bool fault_injector::hit(fault f) noexcept {
    point& p = _points[unsigned(f)];
    if (p.remaining == 0) {
        return false;
    }
    if (p.skip > 0) {
        --p.skip;
        return false;
    }
    --p.remaining;
    ++p.fired;
    bool any = false;
    for (const point& q : _points) {
        any = any || q.remaining > 0;
    }
    _armed = any;
    return true;
}

} // namespace shoal::net::rdma
