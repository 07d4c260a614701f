#pragma once

// The RPC value encoding, derived from C++ types at compile time (no schema files):
//
//   bool                        1 byte, 0 or 1 (anything else: protocol_error)
//   integers, floats, enums     their bytes, little-endian (enums as the underlying type)
//   std::string, string_view,
//   byte spans                  u32 length + the bytes (views point into the received buffer)
//   attachment                  u32 length here; the bytes travel after the payload, uncopied
//   vector, map, unordered_map  u32 count + the elements (key, value for maps)
//   std::array<T, N>            the N elements
//   optional                    u8 0/1 + the value
//   variant                     u32 index + the alternative
//   pair, tuple, aggregates     the elements/fields in order (aggregates by structured binding)
//   types with a member `template <class A> void serialize(A& a) { a(x, y, ...); }`
//                               what `serialize` lists, in order
//
// Reading checks every length against what is left and fails with `protocol_error`; it never
// reads out of bounds and never allocates more than the input can fill. This file does not
// depend on the reactor (the fuzz target builds it alone).

#include "core/small_pool_allocator.hh"
#include "net/temporary_buffer.hh"
#include "rpc/errors.hh"
#include "rpc/reflect.hh"

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

static_assert(std::endian::native == std::endian::little, "the RPC encoding assumes a little-endian host");

namespace shoal::rpc {

/// Bytes that travel next to the serialized payload without being serialized or copied: the
/// sender's buffer is handed to the transport as is, the receiver gets a slice of the received
/// buffer. The way large values should travel.
struct attachment {
    net::temporary_buffer data;

    attachment() = default;
    /// Wraps `b` (no copy).
    explicit attachment(net::temporary_buffer b) noexcept
        : data(std::move(b)) {}
    attachment(attachment&&) noexcept = default;
    attachment& operator=(attachment&&) noexcept = default;
    /// Copies share the bytes (reference counted, no copy of the data).
    attachment(const attachment& o) noexcept
        : data(o.data.share()) {}
    attachment& operator=(const attachment& o) noexcept {
        data = o.data.share();
        return *this;
    }
    /// The bytes.
    std::string_view view() const noexcept { return data.view(); }
    /// Number of bytes.
    size_t size() const noexcept { return data.size(); }
    /// Same bytes.
    friend bool operator==(const attachment& a, const attachment& b) noexcept { return a.view() == b.view(); }
};

/// A read-only span of bytes pointing into the received buffer (valid while the handler runs).
using bytes_view = std::span<const std::byte>;

namespace detail {

template <typename T, template <typename...> class Tmpl>
struct is_instance : std::false_type {};
template <typename... A, template <typename...> class Tmpl>
struct is_instance<Tmpl<A...>, Tmpl> : std::true_type {};
template <typename T, template <typename...> class Tmpl>
inline constexpr bool is_instance_v = is_instance<std::remove_cv_t<T>, Tmpl>::value;

template <typename T>
struct is_std_array : std::false_type {};
template <typename T, size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};

template <typename T>
inline constexpr bool is_map_v = is_instance_v<T, std::map> || is_instance_v<T, std::unordered_map>;

template <typename T>
inline constexpr bool is_stringish_v =
    std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view> || std::is_same_v<T, bytes_view>;

/// Numbers copied as their bytes.
template <typename T>
inline constexpr bool
    is_number_v = (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || std::is_same_v<T, std::byte>;

template <typename T>
struct is_number_vector : std::false_type {};
template <typename E, typename A>
struct is_number_vector<std::vector<E, A>> : std::bool_constant<is_number_v<E>> {};
/// Vectors of numbers, copied in one block.
template <typename T>
inline constexpr bool is_number_vector_v = is_number_vector<T>::value;

struct size_archive;
struct write_archive;
struct read_archive;

template <typename T>
concept has_member_serialize = requires(T& t, size_archive& a) {
    t.serialize(a);
};

template <typename T>
inline constexpr bool is_reflected_v =
    std::is_aggregate_v<T> && !std::is_array_v<T> && !is_std_array<T>::value && !has_member_serialize<T> &&
    !std::is_same_v<T, attachment>;

/// Containers and values nested deeper than this are refused (recursive types via member
/// `serialize` could otherwise exhaust the stack).
inline constexpr unsigned max_depth = 64;

} // namespace detail

/// The attachments of a frame being written (from the shard's `small_pool`: no malloc per frame).
using attachment_list =
    std::vector<net::temporary_buffer, shoal::internal::small_pool_allocator<net::temporary_buffer>>;

/// Writes values into a buffer sized beforehand with `serialized_size`; attachments are
/// collected (shared, not copied) for the frame writer.
class writer {
public:
    /// Writes at `out` (room for exactly what `serialized_size` said); attachments go to `att`.
    writer(char* out, attachment_list* att) noexcept
        : _pos(out)
        , _att(att) {}
    /// Appends `n` raw bytes.
    void put(const void* p, size_t n) noexcept {
        if (n) {
            std::memcpy(_pos, p, n);
            _pos += n;
        }
    }
    /// Appends a little-endian u32.
    void put_u32(uint32_t v) noexcept { put(&v, 4); }
    /// Collects an attachment's bytes (a shared reference).
    void add_attachment(const net::temporary_buffer& b) {
        if (!_att) {
            throw protocol_error("an attachment cannot be used here");
        }
        _att->push_back(b.share());
    }
    /// Where the next byte goes.
    char* position() const noexcept { return _pos; }

private:
    char* _pos;
    attachment_list* _att;
};

/// Reads values from a received payload (and its attachments), checking every length.
class reader {
public:
    /// Reads `payload`; attachment values are sliced, in order, out of `attachments`.
    explicit reader(std::string_view payload, const net::temporary_buffer* attachments = nullptr) noexcept
        : _pos(payload.data())
        , _end(payload.data() + payload.size())
        , _att(attachments) {}
    /// Bytes not read yet.
    size_t remaining() const noexcept { return size_t(_end - _pos); }
    /// The next `n` bytes (a view into the payload); throws protocol_error if fewer are left.
    const char* take(size_t n) {
        if (n > remaining()) {
            throw protocol_error("truncated value: " + std::to_string(n) + " bytes wanted, " +
                                 std::to_string(remaining()) + " left");
        }
        const char* p = _pos;
        _pos += n;
        return p;
    }
    /// A little-endian u32.
    uint32_t take_u32() {
        uint32_t v;
        std::memcpy(&v, take(4), 4);
        return v;
    }
    /// The next `n` attachment bytes (a shared slice, no copy).
    net::temporary_buffer take_attachment(size_t n) {
        if (!_att || n > _att->size() - _att_used) {
            throw protocol_error("attachment length past the attachment bytes");
        }
        auto b = _att->share(_att_used, n);
        _att_used += n;
        return b;
    }
    /// Attachment bytes not claimed by a value yet.
    size_t attachment_remaining() const noexcept { return _att ? _att->size() - _att_used : 0; }
    /// Enters a nested value; throws protocol_error past `detail::max_depth`.
    void enter() {
        if (++_depth > detail::max_depth) {
            throw protocol_error("values nested too deeply");
        }
    }
    /// Leaves a nested value.
    void leave() noexcept { --_depth; }

private:
    const char* _pos;
    const char* _end;
    const net::temporary_buffer* _att;
    size_t _att_used = 0;
    unsigned _depth = 0;
};

template <typename T>
size_t serialized_size(const T& v);
template <typename T>
void serialize(writer& w, const T& v);
template <typename T>
void deserialize(reader& r, T& v);

namespace detail {

/// Sums the sizes of what a member `serialize` lists.
struct size_archive {
    size_t n = 0;
    template <typename... T>
    void operator()(const T&... v) {
        ((n += serialized_size(v)), ...);
    }
};
/// Writes what a member `serialize` lists.
struct write_archive {
    writer& w;
    template <typename... T>
    void operator()(const T&... v) {
        (serialize(w, v), ...);
    }
};
/// Reads what a member `serialize` lists.
struct read_archive {
    reader& r;
    template <typename... T>
    void operator()(T&... v) {
        (deserialize(r, v), ...);
    }
};

inline uint32_t checked_u32(size_t n, const char* what) {
    if (n > UINT32_MAX) {
        throw protocol_error(std::string(what) + " too large to send (over 4 GB)");
    }
    return uint32_t(n);
}

template <typename Tuple, typename F, size_t... I>
void for_each_in(Tuple& t, F&& f, std::index_sequence<I...>) {
    (f(std::get<I>(t)), ...);
}
/// Calls `f` on every element of a tuple, pair or std::array.
template <typename Tuple, typename F>
void for_each_in(Tuple& t, F&& f) {
    for_each_in(t, f, std::make_index_sequence<std::tuple_size_v<std::remove_const_t<Tuple>>>());
}

template <typename V, size_t I = 0>
void emplace_alternative(V& v, size_t index, reader& r) {
    if constexpr (I < std::variant_size_v<V>) {
        if (index == I) {
            deserialize(r, v.template emplace<I>());
        } else {
            emplace_alternative<V, I + 1>(v, index, r);
        }
    }
}

template <typename T>
constexpr size_t min_size();

template <typename... A>
constexpr size_t min_size_of_elements(std::tuple<A...>*) {
    return (size_t(0) + ... + min_size<A>());
}

/// The fewest bytes one value of `T` takes on the wire (bounds element counts on reading).
template <typename T>
constexpr size_t min_size() {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
        return sizeof(T);
    } else if constexpr (is_stringish_v<T> || std::is_same_v<T, attachment> ||
                         is_instance_v<T, std::vector> || is_map_v<T> || is_instance_v<T, std::variant>) {
        return 4;
    } else if constexpr (is_instance_v<T, std::optional>) {
        return 1;
    } else if constexpr (is_std_array<T>::value) {
        return std::tuple_size_v<T> * min_size<typename T::value_type>();
    } else if constexpr (is_instance_v<T, std::pair> || is_instance_v<T, std::tuple>) {
        return min_size_of_elements(
            static_cast<typename decayed_tuple<decltype(std::tuple_cat(std::declval<T>()))>::type*>(nullptr));
    } else {
        return 0; // aggregates and member `serialize`: may be empty
    }
}

/// Reads a count of elements of `T` and checks it against what the input can hold.
template <typename T>
size_t read_count(reader& r) {
    size_t n = r.take_u32();
    constexpr size_t each = min_size<T>();
    if constexpr (each > 0) {
        if (n > r.remaining() / each) {
            throw protocol_error("element count " + std::to_string(n) + " past the end of the data");
        }
    } else if (n > 65536) {
        throw protocol_error("element count " + std::to_string(n) + " of empty elements over 65536");
    }
    return n;
}

} // namespace detail

/// Bytes `v` takes in the payload (attachment bytes excluded).
template <typename T>
size_t serialized_size(const T& v) {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
        return sizeof(U);
    } else if constexpr (detail::is_stringish_v<U>) {
        return 4 + v.size();
    } else if constexpr (std::is_same_v<U, attachment>) {
        return 4;
    } else if constexpr (std::is_same_v<U, std::monostate>) {
        return 0;
    } else if constexpr (detail::is_number_vector_v<U>) {
        return 4 + v.size() * sizeof(typename U::value_type);
    } else if constexpr (detail::is_instance_v<U, std::vector> || detail::is_map_v<U>) {
        size_t n = 4;
        for (const auto& e : v) {
            n += serialized_size(e);
        }
        return n;
    } else if constexpr (detail::is_std_array<U>::value) {
        size_t n = 0;
        for (const auto& e : v) {
            n += serialized_size(e);
        }
        return n;
    } else if constexpr (detail::is_instance_v<U, std::optional>) {
        return 1 + (v ? serialized_size(*v) : 0);
    } else if constexpr (detail::is_instance_v<U, std::variant>) {
        return 4 + std::visit([](const auto& a) { return serialized_size(a); }, v);
    } else if constexpr (detail::is_instance_v<U, std::pair> || detail::is_instance_v<U, std::tuple>) {
        size_t n = 0;
        detail::for_each_in(v, [&n](const auto& e) { n += serialized_size(e); });
        return n;
    } else if constexpr (detail::has_member_serialize<U>) {
        detail::size_archive a;
        const_cast<U&>(v).serialize(a);
        return a.n;
    } else if constexpr (detail::is_reflected_v<U>) {
        size_t n = 0;
        auto fields = tie_fields(v);
        detail::for_each_in(fields, [&n](const auto& e) { n += serialized_size(e); });
        return n;
    } else {
        static_assert(sizeof(U) == 0, "shoal::rpc cannot serialize this type: add a member serialize()");
    }
}

/// Writes `v` (exactly `serialized_size(v)` bytes).
template <typename T>
void serialize(writer& w, const T& v) {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, bool>) {
        uint8_t b = v ? 1 : 0;
        w.put(&b, 1);
    } else if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
        w.put(&v, sizeof(U));
    } else if constexpr (detail::is_stringish_v<U>) {
        w.put_u32(detail::checked_u32(v.size(), "string"));
        w.put(v.data(), v.size());
    } else if constexpr (std::is_same_v<U, attachment>) {
        w.put_u32(detail::checked_u32(v.size(), "attachment"));
        w.add_attachment(v.data);
    } else if constexpr (std::is_same_v<U, std::monostate>) {
    } else if constexpr (detail::is_number_vector_v<U>) {
        w.put_u32(detail::checked_u32(v.size(), "vector"));
        w.put(v.data(), v.size() * sizeof(typename U::value_type));
    } else if constexpr (detail::is_instance_v<U, std::vector> || detail::is_map_v<U>) {
        w.put_u32(detail::checked_u32(v.size(), "container"));
        for (const auto& e : v) {
            serialize(w, e);
        }
    } else if constexpr (detail::is_std_array<U>::value) {
        for (const auto& e : v) {
            serialize(w, e);
        }
    } else if constexpr (detail::is_instance_v<U, std::optional>) {
        serialize(w, bool(v));
        if (v) {
            serialize(w, *v);
        }
    } else if constexpr (detail::is_instance_v<U, std::variant>) {
        w.put_u32(uint32_t(v.index()));
        std::visit([&w](const auto& a) { serialize(w, a); }, v);
    } else if constexpr (detail::is_instance_v<U, std::pair> || detail::is_instance_v<U, std::tuple>) {
        detail::for_each_in(v, [&w](const auto& e) { serialize(w, e); });
    } else if constexpr (detail::has_member_serialize<U>) {
        detail::write_archive a{w};
        const_cast<U&>(v).serialize(a);
    } else if constexpr (detail::is_reflected_v<U>) {
        auto fields = tie_fields(v);
        detail::for_each_in(fields, [&w](const auto& e) { serialize(w, e); });
    } else {
        static_assert(sizeof(U) == 0, "shoal::rpc cannot serialize this type: add a member serialize()");
    }
}

/// Reads into `v`; throws protocol_error on truncated or malformed input (then `v` holds a
/// partial value).
template <typename T>
void deserialize(reader& r, T& v) {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, bool>) {
        uint8_t b = uint8_t(*r.take(1));
        if (b > 1) {
            throw protocol_error("bool byte " + std::to_string(b) + " is neither 0 nor 1");
        }
        v = b == 1;
    } else if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
        std::memcpy(&v, r.take(sizeof(U)), sizeof(U));
    } else if constexpr (std::is_same_v<U, std::string>) {
        size_t n = r.take_u32();
        v.assign(r.take(n), n);
    } else if constexpr (std::is_same_v<U, std::string_view>) {
        size_t n = r.take_u32();
        v = std::string_view(r.take(n), n);
    } else if constexpr (std::is_same_v<U, bytes_view>) {
        size_t n = r.take_u32();
        v = bytes_view(reinterpret_cast<const std::byte*>(r.take(n)), n);
    } else if constexpr (std::is_same_v<U, attachment>) {
        size_t n = r.take_u32();
        v = attachment(r.take_attachment(n));
    } else if constexpr (std::is_same_v<U, std::monostate>) {
    } else if constexpr (detail::is_number_vector_v<U>) {
        using E = typename U::value_type;
        size_t n = detail::read_count<E>(r);
        v.resize(n);
        if (n) {
            std::memcpy(v.data(), r.take(n * sizeof(E)), n * sizeof(E));
        }
    } else if constexpr (detail::is_instance_v<U, std::vector>) {
        using E = typename U::value_type;
        r.enter();
        size_t n = detail::read_count<E>(r);
        v.clear();
        v.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            if constexpr (std::is_same_v<E, bool>) {
                bool b;
                deserialize(r, b);
                v.push_back(b);
            } else {
                deserialize(r, v.emplace_back());
            }
        }
        r.leave();
    } else if constexpr (detail::is_map_v<U>) {
        using K = typename U::key_type;
        using M = typename U::mapped_type;
        r.enter();
        size_t n = detail::read_count<std::pair<K, M>>(r);
        v.clear();
        for (size_t i = 0; i < n; ++i) {
            K key{};
            deserialize(r, key);
            M value{};
            deserialize(r, value);
            if (!v.emplace(std::move(key), std::move(value)).second) {
                throw protocol_error("duplicate key in a map");
            }
        }
        r.leave();
    } else if constexpr (detail::is_std_array<U>::value) {
        for (auto& e : v) {
            deserialize(r, e);
        }
    } else if constexpr (detail::is_instance_v<U, std::optional>) {
        bool present;
        deserialize(r, present);
        if (present) {
            r.enter();
            deserialize(r, v.emplace());
            r.leave();
        } else {
            v.reset();
        }
    } else if constexpr (detail::is_instance_v<U, std::variant>) {
        size_t index = r.take_u32();
        if (index >= std::variant_size_v<U>) {
            throw protocol_error("variant index " + std::to_string(index) + " out of range");
        }
        r.enter();
        detail::emplace_alternative(v, index, r);
        r.leave();
    } else if constexpr (detail::is_instance_v<U, std::pair> || detail::is_instance_v<U, std::tuple>) {
        detail::for_each_in(v, [&r](auto& e) { deserialize(r, e); });
    } else if constexpr (detail::has_member_serialize<U>) {
        detail::read_archive a{r};
        r.enter();
        v.serialize(a);
        r.leave();
    } else if constexpr (detail::is_reflected_v<U>) {
        auto fields = tie_fields(v);
        detail::for_each_in(fields, [&r](auto& e) { deserialize(r, e); });
    } else {
        static_assert(sizeof(U) == 0, "shoal::rpc cannot deserialize this type: add a member serialize()");
    }
}

/// Reads a `T` (default-constructed first) from `r`.
template <typename T>
T deserialize(reader& r) {
    T v{};
    deserialize(r, v);
    return v;
}

template <typename T>
constexpr uint64_t wire_hash(uint64_t h = fnv1a(""));

namespace detail {
/// Hashes a sequence of elements (tuple, pair, aggregate fields) the same way.
template <typename... A>
constexpr uint64_t hash_elements(std::tuple<A...>*, uint64_t h) {
    h = fnv1a_mix(fnv1a("T", h), sizeof...(A));
    ((h = wire_hash<A>(h)), ...);
    return h;
}
} // namespace detail

/// A hash of `T`'s wire structure, the same on every compiler and machine: types that encode
/// the same way hash the same (std::string and std::string_view; a pair, a tuple and an
/// aggregate of the same members), others differ. Types with a member `serialize` hash their
/// name. Signature hashes of verbs are built from it.
template <typename T>
constexpr uint64_t wire_hash(uint64_t h) {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, bool>) {
        return fnv1a("b", h);
    } else if constexpr (std::is_enum_v<U>) {
        return wire_hash<std::underlying_type_t<U>>(h);
    } else if constexpr (std::is_floating_point_v<U>) {
        return fnv1a_mix(fnv1a("f", h), sizeof(U));
    } else if constexpr (std::is_integral_v<U>) {
        return fnv1a_mix(fnv1a(std::is_signed_v<U> ? "i" : "u", h), sizeof(U));
    } else if constexpr (detail::is_stringish_v<U>) {
        return fnv1a("s", h);
    } else if constexpr (std::is_same_v<U, attachment>) {
        return fnv1a("a", h);
    } else if constexpr (std::is_same_v<U, std::monostate>) {
        return fnv1a("T0", h);
    } else if constexpr (detail::is_instance_v<U, std::vector>) {
        return wire_hash<typename U::value_type>(fnv1a("v", h));
    } else if constexpr (detail::is_map_v<U>) {
        return wire_hash<typename U::mapped_type>(wire_hash<typename U::key_type>(fnv1a("m", h)));
    } else if constexpr (detail::is_std_array<U>::value) {
        return wire_hash<typename U::value_type>(fnv1a_mix(fnv1a("A", h), std::tuple_size_v<U>));
    } else if constexpr (detail::is_instance_v<U, std::optional>) {
        return wire_hash<typename U::value_type>(fnv1a("o", h));
    } else if constexpr (detail::is_instance_v<U, std::variant>) {
        return []<typename... A>(std::variant<A...>*, uint64_t h0) {
            h0 = fnv1a_mix(fnv1a("V", h0), sizeof...(A));
            ((h0 = wire_hash<A>(h0)), ...);
            return h0;
        }(static_cast<U*>(nullptr), h);
    } else if constexpr (detail::is_instance_v<U, std::pair> || detail::is_instance_v<U, std::tuple>) {
        return detail::hash_elements(
            static_cast<typename detail::decayed_tuple<decltype(std::tuple_cat(std::declval<U>()))>::type*>(
                nullptr),
            h);
    } else if constexpr (detail::is_reflected_v<U>) {
        return detail::hash_elements(static_cast<field_types<U>*>(nullptr), h);
    } else {
        return fnv1a(type_name<U>(), fnv1a("S", h));
    }
}

/// What a caller receives for a value of type `T` sent by a handler: views into the received
/// buffer (string_view, byte spans) become owning copies (std::string, std::vector<std::byte>).
template <typename T>
struct owned {
    using type = T;
};
template <>
struct owned<std::string_view> {
    using type = std::string;
};
template <>
struct owned<bytes_view> {
    using type = std::vector<std::byte>;
};
/// See `owned`.
template <typename T>
using owned_t = typename owned<std::remove_cvref_t<T>>::type;

} // namespace shoal::rpc
