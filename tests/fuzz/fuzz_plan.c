/* libFuzzer target fuzz_plan: plan files through rt_plan_load and rt_signature_module.
 * The body is fuzz_one_plan in targets.h, shared with the regression replay
 * test (tests/unit/test_fuzz_regressions.c). Seeds: tests/fuzz/corpus/plan/. */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one_plan(data, size);
    return 0;
}
