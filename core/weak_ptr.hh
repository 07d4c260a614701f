#pragma once

#include <cstddef>
#include <utility>

namespace shoal {

template <typename T>
class weakly_referencable;

/// A non-owning pointer to a `T` deriving from `weakly_referencable<T>` that becomes null when
/// the object is destroyed. Costs no allocation: the weak pointers to an object form a list
/// through themselves, which the object walks when it dies. Copyable and movable; one shard.
template <typename T>
class weak_ptr {
public:
    /// A null weak pointer.
    weak_ptr() noexcept = default;
    /// A null weak pointer.
    weak_ptr(std::nullptr_t) noexcept {} // NOLINT: implicit, like a pointer
    weak_ptr(const weak_ptr& o) noexcept { link(o._o); }
    weak_ptr(weak_ptr&& o) noexcept {
        link(o._o);
        o.unlink();
    }
    weak_ptr& operator=(const weak_ptr& o) noexcept {
        if (this != &o) {
            unlink();
            link(o._o);
        }
        return *this;
    }
    weak_ptr& operator=(weak_ptr&& o) noexcept {
        if (this != &o) {
            unlink();
            link(o._o);
            o.unlink();
        }
        return *this;
    }
    ~weak_ptr() { unlink(); }

    /// The object, or null once it was destroyed (or for a null weak pointer).
    T* get() const noexcept { return _o ? static_cast<T*>(_o) : nullptr; }
    T& operator*() const noexcept { return *get(); }
    T* operator->() const noexcept { return get(); }
    /// True while the object lives.
    explicit operator bool() const noexcept { return _o != nullptr; }
    /// Points nowhere from now on.
    void reset() noexcept { unlink(); }

    friend bool operator==(const weak_ptr& a, const weak_ptr& b) noexcept { return a._o == b._o; }
    friend bool operator==(const weak_ptr& a, std::nullptr_t) noexcept { return !a._o; }

private:
    friend class weakly_referencable<T>;

    /// Points at `o` (the base, not the `T`: it is used while `o` dies, after `T`'s destructor).
    void link(weakly_referencable<T>* o) noexcept {
        _o = o;
        if (o) {
            auto& head = o->_weak_head;
            _next = head;
            if (head) {
                head->_prev = this;
            }
            head = this;
        }
    }
    void unlink() noexcept {
        if (!_o) {
            return;
        }
        if (_prev) {
            _prev->_next = _next;
        } else {
            _o->_weak_head = _next;
        }
        if (_next) {
            _next->_prev = _prev;
        }
        _o = nullptr;
        _prev = _next = nullptr;
    }

    weakly_referencable<T>* _o = nullptr;
    weak_ptr* _prev = nullptr;
    weak_ptr* _next = nullptr;
};

/// Base of a class whose objects hand out `weak_ptr`s to themselves (`weak_from_this()`); the
/// destructor nulls every one still pointing here. Copying or moving an object does not carry
/// its weak pointers over: they keep pointing at the original.
template <typename T>
class weakly_referencable {
public:
    /// A weak pointer to this object.
    weak_ptr<T> weak_from_this() noexcept {
        weak_ptr<T> w;
        w.link(this);
        return w;
    }

protected:
    weakly_referencable() noexcept = default;
    weakly_referencable(const weakly_referencable&) noexcept {}
    weakly_referencable& operator=(const weakly_referencable&) noexcept { return *this; }
    /// Nulls the weak pointers still pointing here.
    ~weakly_referencable() {
        while (_weak_head) {
            _weak_head->unlink();
        }
    }

private:
    friend class weak_ptr<T>;
    weak_ptr<T>* _weak_head = nullptr;
};

} // namespace shoal
