// Runs a libFuzzer target over every file of its corpus once, without libFuzzer: the corpus
// becomes a regression test in builds made with g++ (release and ASan/UBSan). Exits non-zero
// when the corpus is missing or empty; a crash or sanitizer report fails the test by itself.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    size_t inputs = 0;
    auto run_file = [&](const std::filesystem::path& p) {
        std::ifstream in(p, std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        ++inputs;
    };
    for (int i = 1; i < argc; ++i) {
        std::filesystem::path p(argv[i]);
        if (std::filesystem::is_directory(p)) {
            for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
                if (e.is_regular_file()) {
                    run_file(e.path());
                }
            }
        } else if (std::filesystem::is_regular_file(p)) {
            run_file(p);
        } else {
            std::fprintf(stderr, "%s: no such corpus: %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    // The empty input always runs too: it is the first thing libFuzzer tries.
    LLVMFuzzerTestOneInput(nullptr, 0);
    if (inputs == 0) {
        std::fprintf(stderr, "%s: the corpus is empty\n", argv[0]);
        return 1;
    }
    std::printf("%zu corpus inputs ran cleanly\n", inputs);
    return 0;
}
