#pragma once

#include "core/smp.hh"

#include <utility>

namespace shoal {

/// An object owned by one shard (its home: where the foreign_ptr was made) that other shards
/// may hold, read and hand around, and that is always destroyed at home: dropping the last
/// foreign_ptr on another shard sends the pointer home with `submit_to` and frees it there. `P`
/// is a smart pointer (std::unique_ptr, std::shared_ptr used on its home shard only, ...).
/// The object itself is not made thread-safe: while another shard uses it, its home must not
/// touch it.
template <typename P>
class foreign_ptr {
public:
    using element_type = typename std::pointer_traits<P>::element_type;

    /// Empty.
    foreign_ptr() noexcept = default;
    /// Takes `p`, owned by the calling shard.
    explicit foreign_ptr(P p) noexcept(std::is_nothrow_move_constructible_v<P>)
        : _p(std::move(p))
        , _home(this_shard_id()) {}
    foreign_ptr(foreign_ptr&& o) noexcept
        : _p(std::move(o._p))
        , _home(o._home) {}
    foreign_ptr& operator=(foreign_ptr&& o) noexcept {
        if (this != &o) {
            destroy();
            _p = std::move(o._p);
            _home = o._home;
        }
        return *this;
    }
    foreign_ptr(const foreign_ptr&) = delete;
    foreign_ptr& operator=(const foreign_ptr&) = delete;
    /// Frees the object on its home shard (at once when called there).
    ~foreign_ptr() { destroy(); }

    element_type* get() const noexcept { return &*_p; }
    element_type& operator*() const noexcept { return *_p; }
    element_type* operator->() const noexcept { return &*_p; }
    explicit operator bool() const noexcept { return bool(_p); }

    /// The shard the object belongs to.
    unsigned get_owner_shard() const noexcept { return _home; }

    /// Gives up ownership: the caller must make sure the pointer is destroyed on its home shard.
    P release() noexcept { return std::move(_p); }

    /// Drops the object (freed at home, as by the destructor) and takes `p`, owned by the calling
    /// shard.
    void reset(P p = P()) noexcept {
        destroy();
        _p = std::move(p);
        _home = this_shard_id();
    }

private:
    void destroy() noexcept {
        if (!_p) {
            return;
        }
        if (_home == this_shard_id()) {
            P dropped = std::move(_p);
            return;
        }
        // The answer carries nothing: it only says the object is gone.
        (void)submit_to(_home, [p = std::move(_p)]() mutable {
            p = P();
        }).handle_exception([](std::exception_ptr) {}); // no engine: the lambda frees it here
    }

    P _p{};
    unsigned _home = 0;
};

/// Wraps `p`, owned by the calling shard, for use on other shards.
template <typename P>
foreign_ptr<P> make_foreign(P p) {
    return foreign_ptr<P>(std::move(p));
}

} // namespace shoal
