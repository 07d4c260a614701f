#pragma once

// Compile-time names and hashes, and field access for aggregates: what the serializer and the
// verb ids are derived from. No schema, no registration, no reactor.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace shoal::rpc {

/// 64-bit FNV-1a of `text`, usable at compile time.
constexpr uint64_t fnv1a(std::string_view text, uint64_t h = 14695981039346656037ull) noexcept {
    for (char c : text) {
        h ^= uint8_t(c);
        h *= 1099511628211ull;
    }
    return h;
}

/// Folds the number `v` into the FNV-1a hash `h` (its eight bytes, little-endian order).
constexpr uint64_t fnv1a_mix(uint64_t h, uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 1099511628211ull;
    }
    return h;
}

namespace detail {

/// The text after `key` in a __PRETTY_FUNCTION__, up to ';' or ']', without '&' and spaces.
/// GCC and clang spell the same entity the same way once the '&' clang adds is gone.
template <size_t N>
struct fixed_name {
    char text[N + 1] = {};
    size_t size = 0;
    constexpr std::string_view view() const noexcept { return {text, size}; }
};

constexpr std::string_view between(std::string_view pretty, std::string_view key) noexcept {
    size_t start = pretty.find(key);
    if (start == std::string_view::npos) {
        return pretty;
    }
    start += key.size();
    size_t end = pretty.find_first_of(";]", start);
    return pretty.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
}

template <auto F>
constexpr std::string_view raw_function_name() noexcept {
    return between(__PRETTY_FUNCTION__, "F = ");
}

template <typename T>
constexpr std::string_view raw_type_name() noexcept {
    return between(__PRETTY_FUNCTION__, "T = ");
}

template <size_t N>
constexpr fixed_name<N> strip_address_of(std::string_view raw) noexcept {
    fixed_name<N> out;
    for (char c : raw) {
        if (c != '&' && c != ' ') {
            out.text[out.size++] = c;
        }
    }
    return out;
}

template <auto F>
inline constexpr auto
    function_name_storage = strip_address_of<raw_function_name<F>().size()>(raw_function_name<F>());

} // namespace detail

/// The qualified name of the function or member function `F` ("ns::echo", "ns::svc::get"), the
/// same under GCC and clang; the basis of verb ids.
template <auto F>
constexpr std::string_view function_name() noexcept {
    return detail::function_name_storage<F>.view();
}

/// The qualified name of type `T` as the compiler spells it.
template <typename T>
constexpr std::string_view type_name() noexcept {
    return detail::raw_type_name<T>();
}

namespace detail {

/// Converts to anything: counts the initialisers an aggregate accepts.
struct any_field {
    template <typename T>
    operator T&() const noexcept;
};

template <typename T, size_t... I>
constexpr bool brace_constructible(std::index_sequence<I...>) noexcept {
    return requires {
        T{((void)I, any_field{})...};
    };
}

template <typename T, size_t N>
constexpr size_t count_fields() noexcept {
    if constexpr (N == 0) {
        return 0;
    } else if constexpr (brace_constructible<T>(std::make_index_sequence<N>())) {
        return N;
    } else {
        return count_fields<T, N - 1>();
    }
}

} // namespace detail

/// Most fields an aggregate may have to be serialized by reflection (more: write a member
/// `serialize`).
inline constexpr size_t max_reflected_fields = 16;

/// Number of fields of the aggregate `T` (C arrays as fields are not supported: use std::array).
template <typename T>
inline constexpr size_t field_count = detail::count_fields<T, max_reflected_fields>();

namespace detail {
#define SHOAL_RPC_TIE(N, ...)                                                                                \
    if constexpr (n == N) {                                                                                  \
        auto& [__VA_ARGS__] = t;                                                                             \
        return std::tie(__VA_ARGS__);                                                                        \
    } else
} // namespace detail

/// The fields of aggregate `t` as a tuple of references (structured bindings).
template <typename T>
constexpr auto tie_fields(T& t) noexcept {
    constexpr size_t n = field_count<std::remove_const_t<T>>;
    SHOAL_RPC_TIE(1, a)
    SHOAL_RPC_TIE(2, a, b)
    SHOAL_RPC_TIE(3, a, b, c)
    SHOAL_RPC_TIE(4, a, b, c, d)
    SHOAL_RPC_TIE(5, a, b, c, d, e)
    SHOAL_RPC_TIE(6, a, b, c, d, e, f)
    SHOAL_RPC_TIE(7, a, b, c, d, e, f, g)
    SHOAL_RPC_TIE(8, a, b, c, d, e, f, g, h)
    SHOAL_RPC_TIE(9, a, b, c, d, e, f, g, h, i)
    SHOAL_RPC_TIE(10, a, b, c, d, e, f, g, h, i, j)
    SHOAL_RPC_TIE(11, a, b, c, d, e, f, g, h, i, j, k)
    SHOAL_RPC_TIE(12, a, b, c, d, e, f, g, h, i, j, k, l)
    SHOAL_RPC_TIE(13, a, b, c, d, e, f, g, h, i, j, k, l, m)
    SHOAL_RPC_TIE(14, a, b, c, d, e, f, g, h, i, j, k, l, m, o)
    SHOAL_RPC_TIE(15, a, b, c, d, e, f, g, h, i, j, k, l, m, o, p)
    SHOAL_RPC_TIE(16, a, b, c, d, e, f, g, h, i, j, k, l, m, o, p, q) {
        return std::tuple<>();
    }
}
#undef SHOAL_RPC_TIE

namespace detail {
template <typename Tuple>
struct decayed_tuple;
template <typename... A>
struct decayed_tuple<std::tuple<A...>> {
    using type = std::tuple<std::remove_cvref_t<A>...>;
};
} // namespace detail

/// The field types of aggregate `T` as a std::tuple (without references).
template <typename T>
using field_types = typename detail::decayed_tuple<decltype(tie_fields(std::declval<T&>()))>::type;

} // namespace shoal::rpc
