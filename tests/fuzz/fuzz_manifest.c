/* libFuzzer target fuzz_manifest: an output directory's outputs.json
 * through ts_outputs_verify (what cleanup and a resume believe). The body
 * is fuzz_one_manifest in targets.h, shared with the regression replay
 * test (tests/unit/test_fuzz_regressions.c). Seeds: tests/fuzz/corpus/manifest/. */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one_manifest(data, size);
    return 0;
}
