/* libFuzzer target fuzz_npy: .npy bytes through the header parser, the whole-file reader and the box reader.
 * The body is fuzz_one_npy in targets.h, shared with the regression replay
 * test (tests/unit/test_fuzz_regressions.c). Seeds: tests/fuzz/corpus/npy/. */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one_npy(data, size);
    return 0;
}
