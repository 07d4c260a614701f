// The C ABI from C#: P/Invoke (DllImport) into libshoal_c, as seed 000 wants other languages to
// use shoal. Starts a runtime, opens a KV client of the servers in SHOAL_KV_SERVERS, stores and
// reads back values (binary bytes, flags, a missing key, a value too large for the buffer),
// checks an error code and its text, and stops. With SHOAL_C_TEST_RDMA (the rdma:// servers of
// the Soft-RoCE guest) the runtime starts RDMA and values also go through registered buffers:
// shoal_kv_set_buffer / shoal_kv_get_buffer and their async forms. Prints "N passed, N failed".
using System;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;

static partial class Shoal { // the rest: shoal_native.cs
    [DllImport(Lib)] public static extern int shoal_kv_open(IntPtr rt, string servers, uint shard, uint timeout_ms, out IntPtr kv);
    [DllImport(Lib)] public static extern void shoal_kv_destroy(IntPtr kv);
    [DllImport(Lib)] public static extern int shoal_kv_set(IntPtr kv, byte[] key, UIntPtr key_size, byte[] value, UIntPtr size, uint flags, long exptime);
    [DllImport(Lib)] public static extern int shoal_kv_get(IntPtr kv, byte[] key, UIntPtr key_size, byte[] output, UIntPtr capacity, out UIntPtr size, out uint flags);
    [DllImport(Lib)] public static extern int shoal_kv_delete(IntPtr kv, byte[] key, UIntPtr key_size);
    [DllImport(Lib)] public static extern int shoal_kv_incr(IntPtr kv, byte[] key, UIntPtr key_size, ulong delta, out ulong value);
    [DllImport(Lib)] public static extern int shoal_kv_decr(IntPtr kv, byte[] key, UIntPtr key_size, ulong delta, out ulong value);
    [DllImport(Lib)] public static extern int shoal_kv_touch(IntPtr kv, byte[] key, UIntPtr key_size, long exptime);
    [DllImport(Lib)] public static extern int shoal_kv_flush_all(IntPtr kv, long delay);
    [DllImport(Lib)] public static extern int shoal_kv_replace(IntPtr kv, byte[] key, UIntPtr key_size, byte[] value, UIntPtr size, uint flags, long exptime);
    [DllImport(Lib)] public static extern int shoal_kv_append(IntPtr kv, byte[] key, UIntPtr key_size, byte[] value, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_kv_prepend(IntPtr kv, byte[] key, UIntPtr key_size, byte[] value, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_kv_cas(IntPtr kv, byte[] key, UIntPtr key_size, byte[] value, UIntPtr size, uint flags, long exptime, ulong cas_unique);
    /// shoal_kv_placed: one result of shoal_kv_get_many_buffer.
    [StructLayout(LayoutKind.Sequential)]
    public struct Placed { public int status; public UIntPtr value_offset; public UIntPtr size; public uint flags; }
    [DllImport(Lib)] public static extern int shoal_kv_get_many_buffer(IntPtr kv, UIntPtr count,
        [MarshalAs(UnmanagedType.LPArray, ArraySubType = UnmanagedType.LPStr)] string[] keys, UIntPtr[] key_sizes,
        IntPtr buf, UIntPtr slot, [Out] Placed[] results, out UIntPtr needed);
    [DllImport(Lib)] public static extern int shoal_kv_stats(IntPtr kv, UIntPtr server, out IntPtr text, out UIntPtr size);
    [DllImport(Lib)] public static extern void shoal_free(IntPtr p);
    [DllImport(Lib)] public static extern int shoal_kv_gat(IntPtr kv, byte[] key, UIntPtr key_size, long exptime, byte[] output, UIntPtr capacity, out UIntPtr size, out uint flags, out ulong cas_unique);
    [DllImport(Lib)] public static extern int shoal_kv_gets(IntPtr kv, byte[] key, UIntPtr key_size, byte[] output, UIntPtr capacity, out UIntPtr size, out uint flags, out ulong cas_unique);

    /// shoal_kv_get_buffer_cb: on OK the value lies at `value_offset` in the buffer, `size`
    /// bytes; on ETOOSMALL `size` is the capacity needed.
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void GetBufferCallback(IntPtr user, int status, UIntPtr value_offset, UIntPtr size, uint flags, IntPtr error);

    [DllImport(Lib)] public static extern UIntPtr shoal_kv_buffer_capacity(UIntPtr key_size, UIntPtr value_size);
    [DllImport(Lib)] public static extern int shoal_kv_set_buffer(IntPtr kv, byte[] key, UIntPtr key_size, IntPtr buf, UIntPtr offset, UIntPtr size, uint flags, long exptime);
    [DllImport(Lib)] public static extern int shoal_kv_get_buffer(IntPtr kv, byte[] key, UIntPtr key_size, IntPtr buf, UIntPtr offset, UIntPtr capacity, out UIntPtr value_offset, out UIntPtr size, out uint flags);
    [DllImport(Lib)] public static extern int shoal_kv_set_buffer_async(IntPtr kv, byte[] key, UIntPtr key_size, IntPtr buf, UIntPtr offset, UIntPtr size, uint flags, long exptime, DoneCallback done, IntPtr user);
    [DllImport(Lib)] public static extern int shoal_kv_get_buffer_async(IntPtr kv, byte[] key, UIntPtr key_size, IntPtr buf, UIntPtr offset, UIntPtr capacity, GetBufferCallback done, IntPtr user);
}

static class Program {
    static int passed, failed;

    static void Check(bool ok, string what) {
        if (ok) { passed++; } else { failed++; Console.Error.WriteLine("FAILED " + what + " (last error: " + Shoal.LastError() + ")"); }
    }

    static UIntPtr Len(byte[] b) { return new UIntPtr((uint)b.Length); }
    static UIntPtr U(long n) { return new UIntPtr((ulong)n); }

    // The async completions: kept in static fields while a call is in flight (the native side
    // calls them later, on a shard thread).
    static readonly ManualResetEvent doneEvent = new ManualResetEvent(false);
    static int doneStatus;
    static ulong doneOffset, doneSize;
    static uint doneFlags;
    static readonly Shoal.DoneCallback onSet = (user, status, error) => { doneStatus = status; doneEvent.Set(); };
    static readonly Shoal.GetBufferCallback onGet = (user, status, at, size, flags, error) => {
        doneStatus = status; doneOffset = at.ToUInt64(); doneSize = size.ToUInt64(); doneFlags = flags; doneEvent.Set();
    };

    static byte[] Pattern(int n, int seed) {
        var b = new byte[n];
        new Random(seed).NextBytes(b);
        return b;
    }

    static bool SameAt(IntPtr buf, ulong at, byte[] want) {
        var got = new byte[want.Length];
        Marshal.Copy(new IntPtr(Shoal.shoal_buffer_data(buf).ToInt64() + (long)at), got, 0, got.Length);
        for (int i = 0; i < want.Length; i++) { if (got[i] != want[i]) { return false; } }
        return true;
    }

    /// Values through registered buffers of shard 1 (the client's shard): a large value (WRITTEN
    /// by the device from the buffer) and a small one, sync and async; READ into a range of
    /// another buffer; a range too small; another shard's buffer.
    static void BufferCalls(IntPtr rt, IntPtr kv) {
        const int bufSize = 256 * 1024;
        IntPtr src, dst, elsewhere;
        Check(Shoal.shoal_buffer_alloc(rt, 1, U(bufSize), out src) == Shoal.OK, "buffer alloc (source)");
        Check(Shoal.shoal_buffer_alloc(rt, 1, U(bufSize), out dst) == Shoal.OK, "buffer alloc (target)");
        Check(Shoal.shoal_buffer_alloc(rt, 0, U(4096), out elsewhere) == Shoal.OK, "buffer alloc (shard 0)");
        if (src == IntPtr.Zero || dst == IntPtr.Zero || elsewhere == IntPtr.Zero) { return; }
        int[] sizes = { 200000, 100, 150000, 60 };
        for (int i = 0; i < sizes.Length; i++) {
            bool async = i >= 2;
            int n = sizes[i];
            var key = Encoding.ASCII.GetBytes("cs-buffer-" + i);
            var value = Pattern(n, 100 + i);
            long from = 1000 + i; // not at the buffer's start
            Marshal.Copy(value, 0, new IntPtr(Shoal.shoal_buffer_data(src).ToInt64() + from), n);
            int rc;
            if (async) {
                doneEvent.Reset();
                rc = Shoal.shoal_kv_set_buffer_async(kv, key, Len(key), src, U(from), U(n), (uint)(40 + i), 0, onSet, IntPtr.Zero);
                Check(rc == Shoal.OK, "set_buffer_async " + i + ": " + Shoal.Name(rc));
                Check(rc == Shoal.OK && doneEvent.WaitOne(30000) && doneStatus == Shoal.OK, "set_buffer_async " + i + " completes OK");
            } else {
                rc = Shoal.shoal_kv_set_buffer(kv, key, Len(key), src, U(from), U(n), (uint)(40 + i), 0);
                Check(rc == Shoal.OK, "set_buffer " + i + ": " + Shoal.Name(rc));
            }
            // As a copying client sees it.
            var output = new byte[n];
            UIntPtr size, at;
            uint flags;
            rc = Shoal.shoal_kv_get(kv, key, Len(key), output, Len(output), out size, out flags);
            bool same = rc == Shoal.OK && size.ToUInt64() == (ulong)n && flags == 40 + i;
            for (int j = 0; same && j < n; j++) { same = output[j] == value[j]; }
            Check(same, "value " + i + " stored from the buffer reads back whole: " + Shoal.Name(rc));
            // Into a range of `dst` starting at 512, of the capacity the call says it needs.
            ulong need = Shoal.shoal_kv_buffer_capacity(Len(key), U(n)).ToUInt64();
            Check(need > (ulong)n, "capacity " + need + " covers a " + n + "-byte value and its record");
            ulong gotAt = 0, gotSize = 0;
            uint gotFlags = 0;
            if (async) {
                doneEvent.Reset();
                rc = Shoal.shoal_kv_get_buffer_async(kv, key, Len(key), dst, U(512), U((long)need), onGet, IntPtr.Zero);
                Check(rc == Shoal.OK && doneEvent.WaitOne(30000), "get_buffer_async " + i + " completes");
                rc = doneStatus; gotAt = doneOffset; gotSize = doneSize; gotFlags = doneFlags;
            } else {
                rc = Shoal.shoal_kv_get_buffer(kv, key, Len(key), dst, U(512), U((long)need), out at, out size, out flags);
                gotAt = at.ToUInt64(); gotSize = size.ToUInt64(); gotFlags = flags;
            }
            Check(rc == Shoal.OK && gotSize == (ulong)n && gotFlags == 40 + i, "get_buffer " + i + ": " + Shoal.Name(rc));
            Check(gotAt >= 512 && gotAt + gotSize <= 512 + need && SameAt(dst, gotAt, value),
                  "get_buffer " + i + " placed the value inside its range, at " + gotAt);
            // Too small: the capacity needed comes back, nothing is lost.
            rc = Shoal.shoal_kv_get_buffer(kv, key, Len(key), dst, U(0), U(50), out at, out size, out flags);
            Check(rc == Shoal.ETOOSMALL && size.ToUInt64() >= (ulong)n && size.ToUInt64() <= need,
                  "get_buffer " + i + " into 50 bytes: " + Shoal.Name(rc) + ", needs " + size.ToUInt64());
        }
        // Several keys at once into the slots of one buffer (minor 8): the small values, a missing key.
        string[] many = { "cs-buffer-1", "cs-buffer-3", "cs-buffer-none" };
        int[] patterns = { 101, 103, 0 };
        int[] lengths = { 100, 60, 0 };
        var manySizes = new UIntPtr[many.Length];
        for (int i = 0; i < many.Length; i++) { manySizes[i] = U(many[i].Length); }
        ulong slot = Shoal.shoal_kv_buffer_capacity(U(14), U(100)).ToUInt64();
        var placed = new Shoal.Placed[many.Length];
        UIntPtr needed;
        int mrc = Shoal.shoal_kv_get_many_buffer(kv, U(many.Length), many, manySizes, dst, U((long)slot), placed, out needed);
        Check(mrc == Shoal.OK, "get_many_buffer: " + Shoal.Name(mrc));
        for (int i = 0; mrc == Shoal.OK && i < many.Length; i++) {
            if (lengths[i] == 0) {
                Check(placed[i].status == Shoal.ENOTFOUND, "get_many_buffer: the missing key");
                continue;
            }
            ulong off = placed[i].value_offset.ToUInt64();
            Check(placed[i].status == Shoal.OK && placed[i].size.ToUInt64() == (ulong)lengths[i] &&
                  off >= (ulong)i * slot && off + (ulong)lengths[i] <= (ulong)(i + 1) * slot &&
                  SameAt(dst, off, Pattern(lengths[i], patterns[i])), "get_many_buffer: key " + many[i] + " in its slot");
        }
        string[] withBig = { "cs-buffer-0" };
        mrc = Shoal.shoal_kv_get_many_buffer(kv, U(1), withBig, new UIntPtr[] { U(11) }, dst, U((long)slot), placed, out needed);
        Check(mrc == Shoal.ETOOSMALL && needed.ToUInt64() >= 200000, "get_many_buffer: a slot too small says what fits");
        var none = Encoding.ASCII.GetBytes("cs-buffer-none");
        UIntPtr a, sz;
        uint f;
        Check(Shoal.shoal_kv_get_buffer(kv, none, Len(none), dst, U(0), U(4096), out a, out sz, out f) == Shoal.ENOTFOUND,
              "get_buffer of a missing key");
        var k0 = Encoding.ASCII.GetBytes("cs-buffer-0");
        Check(Shoal.shoal_kv_set_buffer(kv, k0, Len(k0), elsewhere, U(0), U(100), 0, 0) == Shoal.EINVAL,
              "another shard's buffer refused");
        Check(Shoal.shoal_kv_set_buffer(kv, k0, Len(k0), src, U(bufSize - 10), U(100), 0, 0) == Shoal.EINVAL,
              "a range past the buffer's end refused");
        Shoal.shoal_buffer_free(src);
        Shoal.shoal_buffer_free(dst);
        Shoal.shoal_buffer_free(elsewhere);
    }

    static int Main() {
        string servers = Environment.GetEnvironmentVariable("SHOAL_KV_SERVERS");
        if (servers == null) { Console.Error.WriteLine("run me through with_kv_servers.sh"); return 2; }
        Check(Shoal.shoal_version() / 10000 == 0, "version");

        var opts = new Shoal.RuntimeOptions();
        Shoal.shoal_runtime_options_init(ref opts);
        Check(opts.struct_size.ToUInt64() == (ulong)Marshal.SizeOf(typeof(Shoal.RuntimeOptions)), "options size matches the C struct");
        opts.shards = 2;
        bool rdma = Environment.GetEnvironmentVariable("SHOAL_C_TEST_RDMA") != null;
        opts.rdma = rdma ? 1 : 0;
        IntPtr rt;
        int rc = Shoal.shoal_runtime_start(ref opts, out rt);
        Check(rc == Shoal.OK, "runtime start: " + Shoal.Name(rc));
        if (rc != Shoal.OK) { Console.WriteLine(passed + " passed, " + failed + " failed"); return 1; }

        IntPtr kv;
        Check(Shoal.shoal_kv_open(rt, servers, 1, 120000, out kv) == Shoal.OK, "kv open");

        var key = Encoding.ASCII.GetBytes("csharp-key");
        var value = new byte[1000];
        new Random(7).NextBytes(value);
        value[10] = 0;
        Check(Shoal.shoal_kv_set(kv, key, Len(key), value, Len(value), 42, 0) == Shoal.OK, "set");
        var output = new byte[2000];
        UIntPtr size;
        uint flags;
        rc = Shoal.shoal_kv_get(kv, key, Len(key), output, Len(output), out size, out flags);
        Check(rc == Shoal.OK, "get: " + Shoal.Name(rc));
        Check(size.ToUInt64() == 1000 && flags == 42, "get size and flags");
        bool same = true;
        for (int i = 0; i < value.Length; i++) { same &= output[i] == value[i]; }
        Check(same, "get returns the bytes stored");

        var small = new byte[10];
        rc = Shoal.shoal_kv_get(kv, key, Len(key), small, Len(small), out size, out flags);
        Check(rc == Shoal.ETOOSMALL && size.ToUInt64() == 1000, "too small buffer: " + Shoal.Name(rc));

        Check(Shoal.shoal_kv_delete(kv, key, Len(key)) == Shoal.OK, "delete");
        rc = Shoal.shoal_kv_get(kv, key, Len(key), output, Len(output), out size, out flags);
        Check(rc == Shoal.ENOTFOUND, "missing after delete: " + Shoal.Name(rc));
        Check(Shoal.LastError().Contains("no such key"), "error text");

        var badKey = Encoding.ASCII.GetBytes("bad key");
        Check(Shoal.shoal_kv_set(kv, badKey, Len(badKey), value, Len(value), 0, 0) == Shoal.EINVAL, "bad key refused");

        // Counters, touch and flush_all (minor 7).
        var counter = Encoding.ASCII.GetBytes("cs-counter");
        var ten = Encoding.ASCII.GetBytes("10");
        ulong n;
        Check(Shoal.shoal_kv_set(kv, counter, Len(counter), ten, Len(ten), 0, 0) == Shoal.OK, "set counter");
        Check(Shoal.shoal_kv_incr(kv, counter, Len(counter), 32, out n) == Shoal.OK && n == 42, "incr");
        Check(Shoal.shoal_kv_decr(kv, counter, Len(counter), 2, out n) == Shoal.OK && n == 40, "decr");
        Check(Shoal.shoal_kv_incr(kv, key, Len(key), 1, out n) == Shoal.ENOTFOUND, "incr of a missing key");
        Check(Shoal.shoal_kv_touch(kv, counter, Len(counter), 3600) == Shoal.OK, "touch");
        Check(Shoal.shoal_kv_touch(kv, key, Len(key), 3600) == Shoal.ENOTFOUND, "touch of a missing key");
        Check(Shoal.shoal_kv_flush_all(kv, 0) == Shoal.OK, "flush_all");
        Check(Shoal.shoal_kv_incr(kv, counter, Len(counter), 1, out n) == Shoal.ENOTFOUND, "flushed");

        // replace, append, prepend, cas with the unique from gets, and gat (minor 8).
        var cond = Encoding.ASCII.GetBytes("cs-cond");
        var mid = Encoding.ASCII.GetBytes("mid");
        var ends = Encoding.ASCII.GetBytes("|");
        Check(Shoal.shoal_kv_replace(kv, cond, Len(cond), mid, Len(mid), 0, 0) == Shoal.ENOTSTORED, "replace of a missing key");
        Check(Shoal.shoal_kv_append(kv, cond, Len(cond), ends, Len(ends)) == Shoal.ENOTSTORED, "append to a missing key");
        Check(Shoal.shoal_kv_set(kv, cond, Len(cond), mid, Len(mid), 5, 0) == Shoal.OK, "set");
        Check(Shoal.shoal_kv_replace(kv, cond, Len(cond), mid, Len(mid), 6, 0) == Shoal.OK, "replace");
        Check(Shoal.shoal_kv_append(kv, cond, Len(cond), ends, Len(ends)) == Shoal.OK, "append");
        Check(Shoal.shoal_kv_prepend(kv, cond, Len(cond), ends, Len(ends)) == Shoal.OK, "prepend");
        ulong unique, later;
        var got = new byte[16];
        rc = Shoal.shoal_kv_gets(kv, cond, Len(cond), got, Len(got), out size, out flags, out unique);
        Check(rc == Shoal.OK && Encoding.ASCII.GetString(got, 0, (int)size.ToUInt64()) == "|mid|" && flags == 6 && unique != 0, "gets: " + Shoal.Name(rc));
        Check(Shoal.shoal_kv_cas(kv, cond, Len(cond), mid, Len(mid), 7, 0, unique) == Shoal.OK, "cas with the current unique");
        Check(Shoal.shoal_kv_cas(kv, cond, Len(cond), ends, Len(ends), 8, 0, unique) == Shoal.EEXISTS, "cas with a stale unique");
        rc = Shoal.shoal_kv_gets(kv, cond, Len(cond), got, Len(got), out size, out flags, out later);
        Check(rc == Shoal.OK && Encoding.ASCII.GetString(got, 0, (int)size.ToUInt64()) == "mid" && flags == 7 && later != unique, "cas stored");
        rc = Shoal.shoal_kv_gat(kv, cond, Len(cond), -1, got, Len(got), out size, out flags, out unique);
        Check(rc == Shoal.OK && Encoding.ASCII.GetString(got, 0, (int)size.ToUInt64()) == "mid" && unique == later, "gat: " + Shoal.Name(rc));
        rc = Shoal.shoal_kv_gat(kv, cond, Len(cond), 3600, got, Len(got), out size, out flags, out unique);
        Check(rc == Shoal.ENOTFOUND, "gat into the past expired it: " + Shoal.Name(rc));
        Check(Shoal.shoal_kv_set(kv, cond, Len(cond), mid, Len(mid), 0, 0) == Shoal.OK, "set again");
        Check(Shoal.shoal_kv_delete(kv, cond, Len(cond)) == Shoal.OK, "delete");
        Check(Shoal.shoal_kv_cas(kv, cond, Len(cond), mid, Len(mid), 0, 0, later) == Shoal.ENOTFOUND, "cas of a deleted key");

        // The first server's statistics as "name value" lines, freed by the library.
        IntPtr text;
        rc = Shoal.shoal_kv_stats(kv, UIntPtr.Zero, out text, out size);
        string stats = rc == Shoal.OK ? Marshal.PtrToStringAnsi(text) : "";
        Check(rc == Shoal.OK && stats.Length == (int)size.ToUInt64() && stats.StartsWith("pid ") && stats.Contains("\ncurr_items "), "stats: " + Shoal.Name(rc));
        Shoal.shoal_free(text);
        Check(Shoal.shoal_kv_stats(kv, new UIntPtr(99), out text, out size) == Shoal.EINVAL && text == IntPtr.Zero, "stats of a server that is not there");

        if (rdma) {
            BufferCalls(rt, kv);
        }

        Check(Shoal.shoal_runtime_stop(rt) == Shoal.OK, "stop");
        Check(Shoal.shoal_kv_set(kv, key, Len(key), value, Len(value), 0, 0) == Shoal.ECLOSED, "calls after stop are refused");
        Shoal.shoal_kv_destroy(kv);
        Shoal.shoal_runtime_destroy(rt);
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }
}
