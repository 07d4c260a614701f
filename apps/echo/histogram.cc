#include "apps/echo/histogram.hh"

#include <algorithm>
#include <cmath>

namespace shoal::echo {

void histogram::merge(const histogram& o) noexcept {
    for (unsigned i = 0; i < buckets; ++i) {
        _counts[i] += o._counts[i];
    }
    _count += o._count;
    _sum += o._sum;
    _max = std::max(_max, o._max);
    _min = std::min(_min, o._min);
}

uint64_t histogram::percentile(double p) const noexcept {
    if (_count == 0) {
        return 0;
    }
    p = std::clamp(p, 0.0, 100.0);
    auto rank = uint64_t(std::ceil(p / 100.0 * double(_count)));
    rank = std::clamp<uint64_t>(rank, 1, _count);
    uint64_t seen = 0;
    for (unsigned i = 0; i < buckets; ++i) {
        seen += _counts[i];
        if (seen >= rank) {
            uint64_t mid = lowest_of(i) + (highest_of(i) - lowest_of(i)) / 2;
            return std::clamp(mid, min(), max());
        }
    }
    return _max;
}

} // namespace shoal::echo
