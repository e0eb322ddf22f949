# DsamplerFMA: sets DSAMPLER_FMA_FLAGS to -mfma when the compiler takes it and the build host
# executes FMA, so fmaf() becomes one instruction (it is correctly rounded either way; without
# hardware FMA the C library computes the same value, only slower).
include(CheckCSourceRuns)
set(CMAKE_REQUIRED_FLAGS -mfma)
set(CMAKE_REQUIRED_LIBRARIES m)
check_c_source_runs("
#include <math.h>
int main(void) { volatile float a = 1.0f + 0x1p-23f, b = 1.0f - 0x1p-23f, c = -1.0f;
  return __builtin_cpu_supports(\"fma\") && fmaf(a, b, c) == -0x1p-46f ? 0 : 1; }" DSAMPLER_HOST_HAS_FMA)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LIBRARIES)
if(DSAMPLER_HOST_HAS_FMA)
  set(DSAMPLER_FMA_FLAGS -mfma)
else()
  set(DSAMPLER_FMA_FLAGS "")
endif()
