/* libFuzzer target fuzz_parse: HLO text through the parser, the verifier and the printer.
 * The body is fuzz_one_parse in targets.h, shared with the regression replay
 * test (tests/unit/test_fuzz_regressions.c). Seeds: tests/fuzz/corpus/parse/. */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one_parse(data, size);
    return 0;
}
