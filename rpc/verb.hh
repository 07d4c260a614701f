#pragma once

// What the client and the server derive from a handler at compile time: its verb id (a hash of
// its qualified name, stable across builds and machines), its signature hash (the wire shape of
// its arguments and result), its argument tuple and result type.

#include "core/future.hh"
#include "rpc/reflect.hh"
#include "rpc/serialize.hh"

#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace shoal::rpc {

namespace detail {

template <typename T>
struct unwrap_future {
    using type = T;
};
template <typename T>
struct unwrap_future<future<T>> {
    using type = T;
};

template <typename R, typename C, typename... A>
struct fn_shape {
    /// The class of a member function (void for free functions).
    using klass = C;
    /// The handler's result as the handler produces it (future<T> or T, possibly void).
    using result = R;
    /// The value the reply carries: T of future<T>, or the result itself.
    using value = std::remove_cvref_t<typename unwrap_future<R>::type>;
    /// The arguments as they are deserialized (views stay views).
    using args = std::tuple<std::remove_cvref_t<A>...>;
};

template <typename F>
struct fn_traits;
template <typename R, typename... A>
struct fn_traits<R (*)(A...)> : fn_shape<R, void, A...> {};
template <typename R, typename... A>
struct fn_traits<R (*)(A...) noexcept> : fn_shape<R, void, A...> {};
template <typename R, typename C, typename... A>
struct fn_traits<R (C::*)(A...)> : fn_shape<R, C, A...> {};
template <typename R, typename C, typename... A>
struct fn_traits<R (C::*)(A...) const> : fn_shape<R, C, A...> {};
template <typename R, typename C, typename... A>
struct fn_traits<R (C::*)(A...) noexcept> : fn_shape<R, C, A...> {};
template <typename R, typename C, typename... A>
struct fn_traits<R (C::*)(A...) const noexcept> : fn_shape<R, C, A...> {};

} // namespace detail

/// The compile-time description of handler `F` (a function or a member function pointer).
template <auto F>
using handler_traits = detail::fn_traits<decltype(F)>;

/// The verb id of `F`: FNV-1a of its qualified name ("ns::echo", "ns::svc::get"). The same in
/// every build and on every machine as long as the name does not change.
template <auto F>
inline constexpr uint64_t verb_id = fnv1a(function_name<F>());

/// The signature hash of `F`: the wire shape of its arguments and of its reply value, folded to
/// 32 bits. A caller whose declaration of `F` differs in a way that changes the bytes is refused.
template <auto F>
inline constexpr uint32_t signature_hash = [] {
    using t = handler_traits<F>;
    uint64_t h = wire_hash<typename t::args>(fnv1a("args"));
    if constexpr (std::is_void_v<typename t::value>) {
        h = fnv1a("->void", h);
    } else {
        h = wire_hash<typename t::value>(fnv1a("->", h));
    }
    return uint32_t(h ^ (h >> 32));
}();

/// What `client::call<F>` resolves with: the handler's value with views replaced by owning
/// types (string_view -> std::string), void for handlers returning nothing.
template <auto F>
using call_result_t = owned_t<typename handler_traits<F>::value>;

} // namespace shoal::rpc
