/* libFuzzer target fuzz_sharding: XLA sharding text through ir_sharding_parse and ir_sharding_str.
 * The body is fuzz_one_sharding in targets.h, shared with the regression replay
 * test (tests/unit/test_fuzz_regressions.c). Seeds: tests/fuzz/corpus/sharding/. */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one_sharding(data, size);
    return 0;
}
