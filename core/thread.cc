#include "core/thread.hh"

#include "core/reactor.hh"

#include <cstdlib>
#include <stdexcept>
#include <system_error>

#include <boost/context/detail/fcontext.hpp>
#include <sys/mman.h>
#include <unistd.h>

#ifdef SHOAL_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace shoal {

namespace bctx = boost::context::detail;

namespace internal {

namespace {
thread_local thread_context* tl_current = nullptr;
}

/// One fiber: its stack, its saved context, and the context of whoever switched to it (the
/// reactor's task loop). It is also the task the reactor runs to resume it.
class thread_context final : public task {
public:
    thread_context(std::function<void()> func, thread_attributes attr)
        : _func(std::move(func)) {
        size_t page = size_t(::sysconf(_SC_PAGESIZE));
        _stack_size = (attr.stack_size + page - 1) / page * page + page; // + guard page
        void* mem = ::mmap(nullptr, _stack_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (mem == MAP_FAILED) {
            throw std::system_error(errno, std::system_category(), "cannot allocate a fiber stack");
        }
        ::mprotect(mem, page, PROT_NONE); // overflow faults instead of corrupting memory
        _stack = mem;
        _context = bctx::make_fcontext(static_cast<char*>(_stack) + _stack_size, _stack_size - page, &entry);
        schedule(this);
    }
    ~thread_context() { ::munmap(_stack, _stack_size); }

    future<> join() { return _done.get_future(); }
    bool finished() const noexcept { return _finished; }

    /// Resumes the fiber (the reactor runs this when the fiber's awaited future resolves).
    void run_and_dispose() noexcept override {
        thread_context* outer = tl_current;
        tl_current = this;
#ifdef SHOAL_ASAN
        void* fake = nullptr;
        __sanitizer_start_switch_fiber(&fake, _stack, _stack_size);
#endif
        bctx::transfer_t t = bctx::jump_fcontext(_context, this);
#ifdef SHOAL_ASAN
        __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
        _context = t.fctx;
        tl_current = outer;
        if (_finished) {
            // Resolve only once the fiber's stack is no longer in use.
            if (_error) {
                _done.set_exception(_error);
            } else {
                _done.set_value();
            }
        }
    }

    /// Switches from this fiber back to the reactor.
    void suspend() noexcept {
#ifdef SHOAL_ASAN
        void* fake = nullptr;
        __sanitizer_start_switch_fiber(_finished ? nullptr : &fake, _caller_stack_bottom, _caller_stack_size);
#endif
        bctx::transfer_t t = bctx::jump_fcontext(_caller, nullptr);
#ifdef SHOAL_ASAN
        __sanitizer_finish_switch_fiber(fake, &_caller_stack_bottom, &_caller_stack_size);
#endif
        _caller = t.fctx;
    }

private:
    static void entry(bctx::transfer_t t) noexcept {
        auto* self = static_cast<thread_context*>(t.data);
#ifdef SHOAL_ASAN
        __sanitizer_finish_switch_fiber(nullptr, &self->_caller_stack_bottom, &self->_caller_stack_size);
#endif
        self->_caller = t.fctx;
        try {
            self->_func();
        } catch (...) {
            self->_error = std::current_exception();
        }
        self->_func = nullptr;
        self->_finished = true;
        self->suspend(); // never returns
        std::abort();
    }

    std::function<void()> _func;
    void* _stack = nullptr;
    size_t _stack_size = 0;
    bctx::fcontext_t _context = nullptr;
    bctx::fcontext_t _caller = nullptr;
    const void* _caller_stack_bottom = nullptr;
    size_t _caller_stack_size = 0;
    bool _finished = false;
    std::exception_ptr _error;
    promise<> _done;
};

task* current_fiber() noexcept {
    return tl_current;
}

void suspend_fiber() noexcept {
    tl_current->suspend();
}

} // namespace internal

thread::thread(std::function<void()> func, thread_attributes attr)
    : _context(std::make_unique<internal::thread_context>(std::move(func), attr)) {}

thread::thread(thread&&) noexcept = default;
thread& thread::operator=(thread&&) noexcept = default;

thread::~thread() {
    if (_context && !_context->finished()) {
        // The fiber still runs (or waits); it must outlive this handle.
        std::abort();
    }
}

future<> thread::join() {
    return _context->join();
}

bool thread::running_in_thread() noexcept {
    return internal::tl_current != nullptr;
}

void thread::yield() {
    auto* self = internal::tl_current;
    if (!self) {
        throw std::logic_error("thread::yield() outside a fiber");
    }
    schedule(self);
    self->suspend();
}

} // namespace shoal
