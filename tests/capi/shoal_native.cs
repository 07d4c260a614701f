// The part of libshoal_c's P/Invoke declarations every C# test uses: the library's name, the
// runtime options, the status codes, starting and stopping a runtime, and error texts. Each test
// adds the functions it calls in its own part of the partial class Shoal; the test scripts
// compile this file with the test.
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

    public const int OK = 0, EINVAL = 1, ECLOSED = 2, ENOTFOUND = 4, ETOOSMALL = 5, ECONNECTION = 8;

    [DllImport(Lib)] public static extern int shoal_version();
    [DllImport(Lib)] public static extern IntPtr shoal_last_error();
    [DllImport(Lib)] public static extern IntPtr shoal_status_name(int status);
    [DllImport(Lib)] public static extern void shoal_runtime_options_init(ref RuntimeOptions opts);
    [DllImport(Lib)] public static extern int shoal_runtime_start(ref RuntimeOptions opts, out IntPtr rt);
    [DllImport(Lib)] public static extern int shoal_runtime_stop(IntPtr rt);
    [DllImport(Lib)] public static extern void shoal_runtime_destroy(IntPtr rt);

    public static string LastError() { return Marshal.PtrToStringAnsi(shoal_last_error()); }
    public static string Name(int status) { return Marshal.PtrToStringAnsi(shoal_status_name(status)); }
}
