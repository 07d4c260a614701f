#pragma once

#include "core/small_pool.hh"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace shoal {

template <typename T>
class lw_shared_ptr;
template <typename T, typename... A>
lw_shared_ptr<T> make_lw_shared(A&&... a);

/// Base of a class whose objects keep their own reference count, so that a member function can
/// make an `lw_shared_ptr` to its object (`shared_from_this()`). Such objects must be created by
/// `make_lw_shared`.
template <typename T>
class enable_lw_shared_from_this {
public:
    /// A new reference to this object, which an `lw_shared_ptr` already owns.
    lw_shared_ptr<T> shared_from_this() noexcept;
    /// Same, for a const object.
    lw_shared_ptr<const T> shared_from_this() const noexcept;

protected:
    enable_lw_shared_from_this() noexcept = default;
    /// The count is not copied: a copy is a new object with references of its own.
    enable_lw_shared_from_this(const enable_lw_shared_from_this&) noexcept {}
    enable_lw_shared_from_this& operator=(const enable_lw_shared_from_this&) noexcept { return *this; }
    ~enable_lw_shared_from_this() = default;

private:
    template <typename U>
    friend class lw_shared_ptr;
    mutable long _count = 0;
};

namespace internal {

/// The one allocation of `make_lw_shared<T>` for a `T` without its own count: the count and the
/// object side by side (from the shard's small_pool when small enough).
template <typename T>
struct lw_shared_block {
    SHOAL_SMALL_POOL_ALLOCATED
    template <typename... A>
    explicit lw_shared_block(A&&... a)
        : value(std::forward<A>(a)...) {}
    long count = 0;
    T value;
};

template <typename T>
inline constexpr bool has_own_count =
    std::is_base_of_v<enable_lw_shared_from_this<std::remove_const_t<T>>, T>;

} // namespace internal

/// A reference-counted pointer for one shard: like `std::shared_ptr` without atomics, weak
/// counts, deleters or a separate control block. `make_lw_shared` allocates the count and the
/// object together (or the object alone when it derives from `enable_lw_shared_from_this`); the
/// pointer is one word. Copies must stay on the shard that made the object (hand it to another
/// shard inside a `foreign_ptr`). `lw_shared_ptr<const T>` is made from an `lw_shared_ptr<T>`.
template <typename T>
class lw_shared_ptr {
    using mutable_type = std::remove_const_t<T>;
    using holder =
        std::conditional_t<internal::has_own_count<T>, mutable_type, internal::lw_shared_block<mutable_type>>;

public:
    /// An empty pointer.
    lw_shared_ptr() noexcept = default;
    /// An empty pointer.
    lw_shared_ptr(std::nullptr_t) noexcept {} // NOLINT: implicit, like std::shared_ptr
    lw_shared_ptr(const lw_shared_ptr& o) noexcept
        : _h(o._h) {
        retain();
    }
    lw_shared_ptr(lw_shared_ptr&& o) noexcept
        : _h(std::exchange(o._h, nullptr)) {}
    /// A const view sharing ownership with `o`.
    template <typename U>
    requires(std::is_const_v<T>&& std::is_same_v<U, mutable_type>) lw_shared_ptr(const lw_shared_ptr<U>& o)
    noexcept // NOLINT: implicit, adds const
        : _h(o._h) {
        retain();
    }
    lw_shared_ptr& operator=(const lw_shared_ptr& o) noexcept {
        lw_shared_ptr(o).swap(*this);
        return *this;
    }
    lw_shared_ptr& operator=(lw_shared_ptr&& o) noexcept {
        lw_shared_ptr(std::move(o)).swap(*this);
        return *this;
    }
    lw_shared_ptr& operator=(std::nullptr_t) noexcept {
        reset();
        return *this;
    }
    /// Drops this reference; the last one destroys the object.
    ~lw_shared_ptr() { reset(); }

    /// Drops this reference now, leaving the pointer empty.
    void reset() noexcept {
        if (auto* h = std::exchange(_h, nullptr); h && --count_of(h) == 0) {
            delete h;
        }
    }
    /// Exchanges the pointees.
    void swap(lw_shared_ptr& o) noexcept { std::swap(_h, o._h); }

    /// The object, or null.
    T* get() const noexcept {
        if constexpr (internal::has_own_count<T>) {
            return _h;
        } else {
            return _h ? &_h->value : nullptr;
        }
    }
    T& operator*() const noexcept { return *get(); }
    T* operator->() const noexcept { return get(); }
    /// True unless empty.
    explicit operator bool() const noexcept { return _h != nullptr; }
    /// Number of pointers sharing the object (0 when empty).
    long use_count() const noexcept { return _h ? count_of(_h) : 0; }
    /// True when this is the only pointer to the object.
    bool owned() const noexcept { return use_count() == 1; }

    friend bool operator==(const lw_shared_ptr& a, const lw_shared_ptr& b) noexcept { return a._h == b._h; }
    friend bool operator==(const lw_shared_ptr& a, std::nullptr_t) noexcept { return !a._h; }

private:
    template <typename U>
    friend class lw_shared_ptr;
    template <typename U, typename... A>
    friend lw_shared_ptr<U> make_lw_shared(A&&... a);
    friend class enable_lw_shared_from_this<mutable_type>;

    /// Takes a new reference to `h`.
    explicit lw_shared_ptr(holder* h) noexcept
        : _h(h) {
        retain();
    }
    static long& count_of(holder* h) noexcept {
        if constexpr (internal::has_own_count<T>) {
            return static_cast<const enable_lw_shared_from_this<mutable_type>*>(h)->_count;
        } else {
            return h->count;
        }
    }
    void retain() noexcept {
        if (_h) {
            ++count_of(_h);
        }
    }

    holder* _h = nullptr;
};

/// Makes a `T` from `a...` owned by a new `lw_shared_ptr`: one allocation.
template <typename T, typename... A>
lw_shared_ptr<T> make_lw_shared(A&&... a) {
    using holder = typename lw_shared_ptr<T>::holder;
    return lw_shared_ptr<T>(new holder(std::forward<A>(a)...));
}

/// Makes an `lw_shared_ptr` owning a copy or move of `value`.
template <typename T>
lw_shared_ptr<std::decay_t<T>> make_lw_shared(T&& value) {
    return make_lw_shared<std::decay_t<T>, T>(std::forward<T>(value));
}

template <typename T>
lw_shared_ptr<T> enable_lw_shared_from_this<T>::shared_from_this() noexcept {
    return lw_shared_ptr<T>(static_cast<T*>(this));
}

template <typename T>
lw_shared_ptr<const T> enable_lw_shared_from_this<T>::shared_from_this() const noexcept {
    return lw_shared_ptr<T>(const_cast<T*>(static_cast<const T*>(this)));
}

} // namespace shoal
