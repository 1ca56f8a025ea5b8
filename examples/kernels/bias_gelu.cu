// CUDA C++ (NVRTC): y = gelu(x + bias) for a rows x cols matrix, bias broadcast over rows,
// with the tanh approximation of GELU (torch's gelu(approximate="tanh")).  One thread per
// element: launch ceil(rows * cols / blockDim.x) blocks.
extern "C" __global__ void bias_gelu(const float* x, const float* bias, float* y, int rows, int cols) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)rows * cols) return;
  const float v = x[i] + bias[i % cols];
  const float inner = 0.7978845608f * (v + 0.044715f * v * v * v);  // sqrt(2/pi) (v + 0.044715 v^3)
  y[i] = 0.5f * v * (1.0f + tanhf(inner));
}
