// The C ABI from C#: P/Invoke (DllImport) into libshoal_c, as seed 000 wants other languages to
// use shoal. Starts a runtime, opens a KV client of the servers in SHOAL_KV_SERVERS, stores and
// reads back values (binary bytes, flags, a missing key, a value too large for the buffer),
// checks an error code and its text, and stops. Prints "N passed, N failed".
using System;
using System.Runtime.InteropServices;
using System.Text;

static partial class Shoal { // the rest: shoal_native.cs
    [DllImport(Lib)] public static extern int shoal_kv_open(IntPtr rt, string servers, uint shard, uint timeout_ms, out IntPtr kv);
    [DllImport(Lib)] public static extern void shoal_kv_destroy(IntPtr kv);
    [DllImport(Lib)] public static extern int shoal_kv_set(IntPtr kv, byte[] key, UIntPtr key_size, byte[] value, UIntPtr size, uint flags, long exptime);
    [DllImport(Lib)] public static extern int shoal_kv_get(IntPtr kv, byte[] key, UIntPtr key_size, byte[] output, UIntPtr capacity, out UIntPtr size, out uint flags);
    [DllImport(Lib)] public static extern int shoal_kv_delete(IntPtr kv, byte[] key, UIntPtr key_size);
}

static class Program {
    static int passed, failed;

    static void Check(bool ok, string what) {
        if (ok) { passed++; } else { failed++; Console.Error.WriteLine("FAILED " + what + " (last error: " + Shoal.LastError() + ")"); }
    }

    static UIntPtr Len(byte[] b) { return new UIntPtr((uint)b.Length); }

    static int Main() {
        string servers = Environment.GetEnvironmentVariable("SHOAL_KV_SERVERS");
        if (servers == null) { Console.Error.WriteLine("run me through with_kv_servers.sh"); return 2; }
        Check(Shoal.shoal_version() / 10000 == 0, "version");

        var opts = new Shoal.RuntimeOptions();
        Shoal.shoal_runtime_options_init(ref opts);
        Check(opts.struct_size.ToUInt64() == (ulong)Marshal.SizeOf(typeof(Shoal.RuntimeOptions)), "options size matches the C struct");
        opts.shards = 2;
        IntPtr rt;
        int rc = Shoal.shoal_runtime_start(ref opts, out rt);
        Check(rc == Shoal.OK, "runtime start: " + Shoal.Name(rc));
        if (rc != Shoal.OK) { Console.WriteLine(passed + " passed, " + failed + " failed"); return 1; }

        IntPtr kv;
        Check(Shoal.shoal_kv_open(rt, servers, 1, 5000, out kv) == Shoal.OK, "kv open");

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

        Check(Shoal.shoal_runtime_stop(rt) == Shoal.OK, "stop");
        Check(Shoal.shoal_kv_set(kv, key, Len(key), value, Len(value), 0, 0) == Shoal.ECLOSED, "calls after stop are refused");
        Shoal.shoal_kv_destroy(kv);
        Shoal.shoal_runtime_destroy(rt);
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }
}
