// The part of libshoal_c's P/Invoke declarations the C# tests share: the library's name, the
// runtime options, the status codes, starting and stopping a runtime, error texts, registered
// buffers, the completion callback, and the remote memory pool (shoal_pool_* / shoal_lease_*,
// all of them, as in shoal_c.h). Each test adds the other functions it calls in its own part of
// the partial class Shoal; the test scripts compile this file with the test.
using System;
using System.Runtime.InteropServices;

static partial class Shoal {
    const string Lib = "shoal_c";

    [StructLayout(LayoutKind.Sequential)]
    public struct RuntimeOptions {
        public UIntPtr struct_size;
        public uint shards;
        public int pin;
        public int rdma;
    }

    public const int OK = 0, EINVAL = 1, ECLOSED = 2, ESTATE = 3, ENOTFOUND = 4, ETOOSMALL = 5, ENOTSTORED = 6, EEXISTS = 7, ECONNECTION = 8;
    public const int EQUOTA = 14, EWATERMARK = 15;

    /// shoal_done_cb. Keep the delegate alive (a static field) until the call it was passed to
    /// completed: the native side calls it later, on a shard thread.
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void DoneCallback(IntPtr user, int status, IntPtr error);
    /// shoal_lease_cb: on OK, `lease` is a new lease owned by the callee (shoal_lease_destroy).
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void LeaseCallback(IntPtr user, int status, IntPtr lease, IntPtr error);

    [DllImport(Lib)] public static extern int shoal_version();
    [DllImport(Lib)] public static extern IntPtr shoal_last_error();
    [DllImport(Lib)] public static extern IntPtr shoal_status_name(int status);
    [DllImport(Lib)] public static extern void shoal_runtime_options_init(ref RuntimeOptions opts);
    [DllImport(Lib)] public static extern int shoal_runtime_start(ref RuntimeOptions opts, out IntPtr rt);
    [DllImport(Lib)] public static extern int shoal_runtime_stop(IntPtr rt);
    [DllImport(Lib)] public static extern void shoal_runtime_destroy(IntPtr rt);

    [DllImport(Lib)] public static extern int shoal_buffer_alloc(IntPtr rt, uint shard, UIntPtr size, out IntPtr buf);
    [DllImport(Lib)] public static extern IntPtr shoal_buffer_data(IntPtr buf);
    [DllImport(Lib)] public static extern void shoal_buffer_free(IntPtr buf);

    [DllImport(Lib)] public static extern int shoal_pool_connect(IntPtr rt, uint shard, string address, uint timeout_ms, out IntPtr pool);
    [DllImport(Lib)] public static extern int shoal_pool_lease(IntPtr pool, UIntPtr size, out IntPtr lease);
    [DllImport(Lib)] public static extern int shoal_pool_lease_async(IntPtr pool, UIntPtr size, LeaseCallback done, IntPtr user);
    [DllImport(Lib)] public static extern int shoal_pool_close(IntPtr pool);
    [DllImport(Lib)] public static extern void shoal_pool_destroy(IntPtr pool);
    [DllImport(Lib)] public static extern UIntPtr shoal_lease_size(IntPtr lease);
    [DllImport(Lib)] public static extern int shoal_lease_write(IntPtr lease, ulong offset, byte[] data, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_lease_read(IntPtr lease, ulong offset, [Out] byte[] data, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_lease_write_buffer(IntPtr lease, ulong offset, IntPtr buf, UIntPtr buf_offset, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_lease_read_buffer(IntPtr lease, ulong offset, IntPtr buf, UIntPtr buf_offset, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_lease_write_async(IntPtr lease, ulong offset, byte[] data, UIntPtr size, DoneCallback done, IntPtr user);
    /// `data` must stay valid (unmanaged or pinned) until `done` ran.
    [DllImport(Lib)] public static extern int shoal_lease_read_async(IntPtr lease, ulong offset, IntPtr data, UIntPtr size, DoneCallback done, IntPtr user);
    [DllImport(Lib)] public static extern int shoal_lease_write_buffer_async(IntPtr lease, ulong offset, IntPtr buf, UIntPtr buf_offset, UIntPtr size, DoneCallback done, IntPtr user);
    [DllImport(Lib)] public static extern int shoal_lease_read_buffer_async(IntPtr lease, ulong offset, IntPtr buf, UIntPtr buf_offset, UIntPtr size, DoneCallback done, IntPtr user);
    [DllImport(Lib)] public static extern int shoal_lease_release(IntPtr lease);
    [DllImport(Lib)] public static extern int shoal_lease_release_async(IntPtr lease, DoneCallback done, IntPtr user);
    [DllImport(Lib)] public static extern void shoal_lease_destroy(IntPtr lease);

    /// Starts a runtime of `shards` shards with RDMA on every shard; returns the status.
    public static int StartRdmaRuntime(uint shards, out IntPtr rt) {
        var opts = new RuntimeOptions();
        shoal_runtime_options_init(ref opts);
        opts.shards = shards;
        opts.rdma = 1;
        return shoal_runtime_start(ref opts, out rt);
    }

    public static string LastError() { return Marshal.PtrToStringAnsi(shoal_last_error()); }
    public static string Name(int status) { return Marshal.PtrToStringAnsi(shoal_status_name(status)); }
}
