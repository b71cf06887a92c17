// Uses only installed headers: a GEMM through the CPU backend and the library's errors.
#include <cstdio>

#include <perceiver/backend.h>
#include <perceiver/error.h>
#include <perceiver/threads.h>

int main() {
  const auto& k = perceiver::cpu_backend().kernels<float>();
  const float a[6] = {1, 2, 3, 4, 5, 6};  // [2,3]
  const float b[3] = {1, 0, -1};          // [3,1]
  float c[2] = {0, 0};
  k.gemm(perceiver::Transpose::kNo, perceiver::Transpose::kNo, 2, 1, 3, 1.0f, a, 3, b, 1, 0.0f, c, 1);
  if (c[0] != -2.0f || c[1] != -2.0f) {
    std::fprintf(stderr, "wrong gemm result %g %g\n", c[0], c[1]);
    return 1;
  }
  try {
    perceiver::make_backend("tpu");
    return 1;
  } catch (const perceiver::Error& e) {
    std::printf("consumer ok: gemm [-2 -2], error \"%s\", %s\n", e.what(),
                perceiver::threads::topology().summary.c_str());
  }
  return 0;
}
