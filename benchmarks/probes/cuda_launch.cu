// What one CUDA kernel launch costs the host and the device, without Python or PyTorch in the way: the cost a
// C/CUDA training program (llm.c's train_gpt2cu) pays per kernel. benchmarks/probes/host_launch.py builds and runs it:
//
//     nvcc -O2 -o cuda_launch benchmarks/probes/cuda_launch.cu && ./cuda_launch
//
// Prints one JSON object (seconds per kernel):
//   launch_host_s   host time of one cudaLaunchKernel, bursts of BURST launches (fewer than the launch queue
//                   holds, so the host never waits for the device), median over bursts
//   stream_s        wall time per kernel of a long back-to-back stream: max(host, device) per kernel
//   graph_kernel_s  device time per kernel of a CUDA graph of GRAPH kernels replayed (no host launch per kernel)
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__global__ void tiny(float* x) {
    if (threadIdx.x == 0 && blockIdx.x == 0) x[0] += 1.0f;
}

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
    fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
    const int BURST = 256, BURSTS = 200, STREAM = 20000, GRAPH = 1000, REPLAYS = 20;
    float* d;
    CHECK(cudaMalloc(&d, sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 2000; ++i) tiny<<<1, 32, 0, s>>>(d);  // warm-up: module load, clocks
    CHECK(cudaStreamSynchronize(s));

    std::vector<double> per;
    for (int b = 0; b < BURSTS; ++b) {
        double t0 = now();
        for (int i = 0; i < BURST; ++i) tiny<<<1, 32, 0, s>>>(d);
        per.push_back((now() - t0) / BURST);
        CHECK(cudaStreamSynchronize(s));
    }
    std::sort(per.begin(), per.end());
    double launch = per[per.size() / 2];

    double t0 = now();
    for (int i = 0; i < STREAM; ++i) tiny<<<1, 32, 0, s>>>(d);
    CHECK(cudaStreamSynchronize(s));
    double stream = (now() - t0) / STREAM;

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < GRAPH; ++i) tiny<<<1, 32, 0, s>>>(d);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, s));  // warm-up replay
    CHECK(cudaStreamSynchronize(s));
    cudaEvent_t a, z;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&z));
    CHECK(cudaEventRecord(a, s));
    for (int r = 0; r < REPLAYS; ++r) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(z, s));
    CHECK(cudaEventSynchronize(z));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, z));
    double graph_kernel = ms * 1e-3 / (REPLAYS * GRAPH);

    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    printf("{\"launch_host_s\": %.9g, \"stream_s\": %.9g, \"graph_kernel_s\": %.9g, \"burst\": %d, "
           "\"bursts\": %d, \"stream_kernels\": %d, \"graph_kernels\": %d, \"cuda_runtime\": %d, "
           "\"cuda_driver\": %d}\n", launch, stream, graph_kernel, BURST, BURSTS, STREAM, GRAPH, runtime, driver);
    return 0;
}
