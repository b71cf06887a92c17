// The CUDA backend's behaviour that needs no GPU: with no driver or device, --device cuda is one
// clear line naming cudaGetDeviceCount's error with a HINT; the GPU of a rank comes from its MPI
// local rank. Runs here (label backend) in every CUDA build.
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "gpu_test.h"

namespace perceiver {
namespace {

TEST(CudaDevice, NoGpuIsOneClearLineWithAHint) {
  const std::string why = gpu_test::no_gpu_reason();
  if (why.empty()) {  // a GPU is present: the backend opens and says which
    EXPECT_EQ(make_backend("cuda")->describe().rfind("cuda: ", 0), 0u);
    return;
  }
  try {
    make_backend("cuda");
    FAIL() << "make_backend(\"cuda\") did not throw although " << why;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no usable NVIDIA GPU"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaGetDeviceCount"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaError"), std::string::npos) << m;  // the code's name
    EXPECT_NE(m.find("HINT"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    std::printf("[ message ] %s\n", m.c_str());
  }
}

TEST(CudaDevice, RankPicksItsGpuFromTheLocalRank) {
  BackendOptions o;
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ::unsetenv("MPI_LOCALRANKID");
  ::unsetenv("SLURM_LOCALID");
  EXPECT_EQ(cuda::requested_device(o), -1);
  ::setenv("SLURM_LOCALID", "2", 1);
  EXPECT_EQ(cuda::requested_device(o), 2);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);  // OpenMPI's wins (mpirun inside Slurm)
  EXPECT_EQ(cuda::requested_device(o), 3);
  o.device_index = 1;  // an explicit index wins over the environment
  EXPECT_EQ(cuda::requested_device(o), 1);
  o.device_index = -1;
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
  EXPECT_THROW(cuda::requested_device(o), Error);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ::unsetenv("SLURM_LOCALID");
}

TEST(CudaDevice, TheBuildHasTheBackend) {
  const auto names = available_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
}

}  // namespace
}  // namespace perceiver
