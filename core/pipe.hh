#pragma once

#include "core/future.hh"
#include "core/queue.hh"

#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

namespace shoal {

/// Thrown into a pipe writer's writes once its reader is gone.
class broken_pipe_exception : public std::runtime_error {
public:
    broken_pipe_exception()
        : std::runtime_error("broken pipe") {}
};

template <typename T>
class pipe_reader;
template <typename T>
class pipe_writer;

namespace internal {

/// What a pipe's two ends share: a bounded queue of items (`nullopt` marks the end of the
/// stream) and which ends are still there. Freed by the last end to go.
template <typename T>
struct pipe_buffer {
    explicit pipe_buffer(size_t size)
        : items(size) {}
    queue<std::optional<T>> items;
    bool reader_gone = false;
    bool writer_gone = false;
};

} // namespace internal

/// A one-way channel of `T` between two tasks of one shard, bounded to `size` items in flight:
/// the writer's `write` waits for room, the reader's `read` waits for an item and returns
/// `nullopt` once the writer is gone and every item was read (end of stream). Destroying the
/// reader fails the writer's pending and later writes with `broken_pipe_exception`.
template <typename T>
class pipe {
public:
    /// A pipe holding up to `size` items (at least one) between `reader` and `writer`.
    explicit pipe(size_t size);

    /// The reading end; move it to where the consumer runs.
    pipe_reader<T> reader;
    /// The writing end; move it to where the producer runs.
    pipe_writer<T> writer;
};

/// The reading end of a `pipe`. Movable, not copyable.
template <typename T>
class pipe_reader {
public:
    pipe_reader(pipe_reader&& o) noexcept
        : _buf(std::exchange(o._buf, nullptr)) {}
    pipe_reader& operator=(pipe_reader&& o) noexcept {
        if (this != &o) {
            leave();
            _buf = std::exchange(o._buf, nullptr);
        }
        return *this;
    }
    pipe_reader(const pipe_reader&) = delete;
    pipe_reader& operator=(const pipe_reader&) = delete;
    /// Fails the writer's pending and later writes with `broken_pipe_exception`.
    ~pipe_reader() { leave(); }

    /// The next item, waiting for one if needed; `nullopt` at the end of the stream (the writer
    /// is gone and everything it wrote was read). Call it again only once the previous read
    /// resolved.
    future<std::optional<T>> read() {
        auto& q = _buf->items;
        if (q.empty() && _buf->writer_gone) {
            return make_ready_future<std::optional<T>>(std::nullopt);
        }
        return q.pop_eventually();
    }

private:
    friend class pipe<T>;
    explicit pipe_reader(internal::pipe_buffer<T>* b) noexcept
        : _buf(b) {}
    void leave() noexcept {
        if (auto* b = std::exchange(_buf, nullptr)) {
            b->reader_gone = true;
            if (b->writer_gone) {
                delete b;
            } else {
                b->items.abort(std::make_exception_ptr(broken_pipe_exception()));
            }
        }
    }
    internal::pipe_buffer<T>* _buf;
};

/// The writing end of a `pipe`; destroying it ends the stream. Movable, not copyable.
template <typename T>
class pipe_writer {
public:
    pipe_writer(pipe_writer&& o) noexcept
        : _buf(std::exchange(o._buf, nullptr)) {}
    pipe_writer& operator=(pipe_writer&& o) noexcept {
        if (this != &o) {
            leave();
            _buf = std::exchange(o._buf, nullptr);
        }
        return *this;
    }
    pipe_writer(const pipe_writer&) = delete;
    pipe_writer& operator=(const pipe_writer&) = delete;
    /// Ends the stream: the reader gets `nullopt` once it has read everything written.
    ~pipe_writer() { leave(); }

    /// Sends `item`, waiting while the pipe is full; fails with `broken_pipe_exception` if the
    /// reader is or gets destroyed before the item was taken in.
    future<> write(T&& item) { return _buf->items.push_eventually(std::optional<T>(std::move(item))); }

private:
    friend class pipe<T>;
    explicit pipe_writer(internal::pipe_buffer<T>* b) noexcept
        : _buf(b) {}
    void leave() noexcept {
        if (auto* b = std::exchange(_buf, nullptr)) {
            b->writer_gone = true;
            if (b->reader_gone) {
                delete b;
            } else if (b->items.empty()) {
                // Wakes a pending read with the end of the stream (or leaves the marker for the
                // next one); an empty queue always has room.
                b->items.push(std::nullopt);
            }
        }
    }
    internal::pipe_buffer<T>* _buf;
};

template <typename T>
pipe<T>::pipe(size_t size)
    : reader(nullptr)
    , writer(nullptr) {
    auto* b = new internal::pipe_buffer<T>(size);
    reader._buf = b;
    writer._buf = b;
}

} // namespace shoal
