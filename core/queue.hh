#pragma once

#include "core/condition_variable.hh"
#include "core/future.hh"

#include <cassert>
#include <cstddef>
#include <deque>
#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

namespace shoal {

/// Thrown into the waiters of a queue destroyed while they waited.
class broken_queue : public std::runtime_error {
public:
    broken_queue()
        : std::runtime_error("queue broken") {}
};

/// A bounded FIFO of `T` for one shard, between producers and consumers that may wait: `push`
/// and `pop` never wait (they report a full or empty queue), `push_eventually` and
/// `pop_eventually` wait for room or for an item, in FIFO order among waiters. An item pushed
/// while consumers wait goes straight to the oldest one; an item popped from a full queue lets
/// the oldest waiting producer's item in. `abort(ex)` drops the items and fails every current and
/// later operation with `ex`. Neither copyable nor movable; not thread-safe by design.
template <typename T>
class queue {
public:
    /// A queue holding at most `max_size` items (at least one).
    explicit queue(size_t max_size)
        : _max(max_size) {
        assert(max_size > 0);
    }
    queue(const queue&) = delete;
    queue& operator=(const queue&) = delete;
    /// Fails the operations still waiting with `broken_queue`.
    ~queue() {
        if (!_ex &&
            (!_poppers.empty() || !_pushers.empty() || _not_empty.has_waiters() || _not_full.has_waiters())) {
            abort(std::make_exception_ptr(broken_queue()));
        }
    }

    /// Adds `item` if there is room (handing it to the oldest waiting consumer if any); returns
    /// false, keeping `item` untouched, when the queue is full. Throws the abort's exception once
    /// aborted.
    bool push(T&& item) {
        check();
        if (!_poppers.empty()) {
            hand_to_popper(std::move(item));
            return true;
        }
        if (full() || !_pushers.empty()) {
            return false;
        }
        _q.push_back(std::move(item));
        _not_empty.broadcast();
        return true;
    }

    /// Removes and returns the oldest item, or nothing when the queue is empty. Throws the
    /// abort's exception once aborted.
    std::optional<T> pop() {
        check();
        if (_q.empty()) {
            return std::nullopt;
        }
        std::optional<T> item(std::move(_q.front()));
        _q.pop_front();
        admit_pushers();
        return item;
    }

    /// Adds `item`, waiting for room if the queue is full; resolves once the item is in the queue
    /// (or taken by a consumer). Fails with the abort's exception if the queue is or gets aborted
    /// before that; the item is then dropped.
    future<> push_eventually(T&& item) {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (push(std::move(item))) {
            return make_ready_future<>();
        }
        auto& w = _pushers.emplace_back(std::move(item));
        return w.pr.get_future();
    }

    /// Removes and returns the oldest item, waiting for one if the queue is empty. Fails with the
    /// abort's exception if the queue is or gets aborted first.
    future<T> pop_eventually() {
        if (_ex) {
            return make_exception_future<T>(_ex);
        }
        if (!_q.empty()) {
            return make_ready_future<T>(*pop());
        }
        return _poppers.emplace_back().get_future();
    }

    /// Resolves once the queue holds an item (at once if it does now). Another consumer may take
    /// the item first: check again. Fails with the abort's exception.
    future<> not_empty() {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (!_q.empty()) {
            return make_ready_future<>();
        }
        return _not_empty.wait();
    }

    /// Resolves once the queue has room (at once if it has now). Another producer may fill it
    /// first: check again. Fails with the abort's exception.
    future<> not_full() {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (!full()) {
            return make_ready_future<>();
        }
        return _not_full.wait();
    }

    /// Drops the items and fails every waiting and later operation with `ex`. Later calls do
    /// nothing.
    void abort(std::exception_ptr ex) noexcept {
        if (_ex) {
            return;
        }
        _ex = ex;
        _q.clear();
        for (auto& p : _poppers) {
            p.set_exception(ex);
        }
        _poppers.clear();
        for (auto& p : _pushers) {
            p.pr.set_exception(ex);
        }
        _pushers.clear();
        _not_empty.broken(ex);
        _not_full.broken(ex);
    }

    /// Items held now.
    size_t size() const noexcept { return _q.size(); }
    /// The most items the queue holds.
    size_t max_size() const noexcept { return _max; }
    /// True when no item is held.
    bool empty() const noexcept { return _q.empty(); }
    /// True when no more item fits.
    bool full() const noexcept { return _q.size() >= _max; }
    /// True once `abort` was called.
    bool aborted() const noexcept { return bool(_ex); }

private:
    /// A producer waiting for room, with its item.
    struct pusher {
        explicit pusher(T&& i)
            : item(std::move(i)) {}
        promise<> pr;
        T item;
    };

    void check() const {
        if (_ex) {
            std::rethrow_exception(_ex);
        }
    }
    void hand_to_popper(T&& item) noexcept {
        _poppers.front().set_value(std::move(item));
        _poppers.pop_front();
    }
    /// Lets waiting producers' items into the room there is now, oldest first.
    void admit_pushers() noexcept {
        while (!_pushers.empty() && !full()) {
            auto& w = _pushers.front();
            _q.push_back(std::move(w.item));
            w.pr.set_value();
            _pushers.pop_front();
        }
        if (!full()) {
            _not_full.broadcast();
        }
    }

    std::deque<T> _q;
    size_t _max;
    std::deque<promise<T>> _poppers; // only while _q is empty
    std::deque<pusher> _pushers;     // only while _q is full
    condition_variable _not_empty;
    condition_variable _not_full;
    std::exception_ptr _ex;
};

} // namespace shoal
