#include "net/foreign_buffer.hh"

#include "core/log.hh"
#include "core/smp.hh"

#include <utility>

namespace shoal::net {

namespace {

logger foreign_log("net");

/// Drops `ref` (allocated on `home`) on `home`.
void drop_at_home(temporary_buffer* ref, unsigned home) noexcept {
    if (home == this_shard_id()) {
        delete ref;
        return;
    }
    try {
        (void)submit_to(home, [ref] { delete ref; });
    } catch (...) {
        // No memory for the message: leaking the bytes is safer than touching them from here.
        foreign_log.error("foreign_buffer: cannot send a buffer home to shard {}: {}", home,
                          std::current_exception());
    }
}

/// The owner of a taken foreign buffer on the receiving shard: its count lives there; the last
/// slice sends the home reference home.
class remote_owner final : public buffer_owner {
public:
    remote_owner(temporary_buffer* home_ref, unsigned home) noexcept
        : _home_ref(home_ref)
        , _home(home) {}

private:
    void release() noexcept override {
        drop_at_home(_home_ref, _home);
        delete this;
    }

    temporary_buffer* _home_ref;
    unsigned _home;
};

} // namespace

foreign_buffer::foreign_buffer(const temporary_buffer& buf)
    : _size(buf.size())
    , _home(this_shard_id()) {
    if (buf.empty()) {
        return;
    }
    if (buf.size() <= copy_threshold) {
        _copy = temporary_buffer::copy_of(buf.view());
        return;
    }
    _home_ref = new temporary_buffer(buf.share());
}

foreign_buffer::foreign_buffer(foreign_buffer&& o) noexcept
    : _copy(std::move(o._copy))
    , _home_ref(std::exchange(o._home_ref, nullptr))
    , _size(std::exchange(o._size, 0))
    , _home(o._home) {}

foreign_buffer& foreign_buffer::operator=(foreign_buffer&& o) noexcept {
    if (this != &o) {
        drop();
        _copy = std::move(o._copy);
        _home_ref = std::exchange(o._home_ref, nullptr);
        _size = std::exchange(o._size, 0);
        _home = o._home;
    }
    return *this;
}

foreign_buffer::~foreign_buffer() {
    drop();
}

void foreign_buffer::drop() noexcept {
    _copy.reset();
    if (_home_ref) {
        drop_at_home(std::exchange(_home_ref, nullptr), _home);
    }
    _size = 0;
}

temporary_buffer foreign_buffer::take() && {
    size_t size = std::exchange(_size, 0);
    if (_copy) {
        return std::move(_copy);
    }
    if (!_home_ref) {
        return temporary_buffer();
    }
    temporary_buffer* ref = std::exchange(_home_ref, nullptr);
    if (_home == this_shard_id()) {
        // Back home: the reference can be used as it is.
        temporary_buffer b = std::move(*ref);
        delete ref;
        return b;
    }
    remote_owner* owner;
    try {
        owner = new remote_owner(ref, _home);
    } catch (...) {
        drop_at_home(ref, _home);
        throw;
    }
    return temporary_buffer(const_cast<char*>(ref->get()), size, owner);
}

} // namespace shoal::net
