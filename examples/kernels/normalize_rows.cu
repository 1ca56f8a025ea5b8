// CUDA C++ (NVRTC): block r normalizes row r of a rows x cols matrix to zero mean and
// unit variance.  The row's sum and sum of squares come from a shared-memory tree
// reduction, so launch it with block = BLOCK threads (a power of two).
#define BLOCK 256

extern "C" __global__ void normalize_rows(const float* x, float* y, int cols, float eps) {
  __shared__ float sum[BLOCK], sumsq[BLOCK];
  const int t = threadIdx.x;
  const float* row = x + (long)blockIdx.x * cols;
  float s = 0.0f, q = 0.0f;
  for (int j = t; j < cols; j += BLOCK) {
    float v = row[j];
    s += v;
    q += v * v;
  }
  sum[t] = s;
  sumsq[t] = q;
  __syncthreads();
  for (int half = BLOCK / 2; half > 0; half >>= 1) {  // every thread reaches every barrier
    if (t < half) {
      sum[t] += sum[t + half];
      sumsq[t] += sumsq[t + half];
    }
    __syncthreads();
  }
  const float mean = sum[0] / cols;
  const float inv_std = rsqrtf(sumsq[0] / cols - mean * mean + eps);
  float* out = y + (long)blockIdx.x * cols;
  for (int j = t; j < cols; j += BLOCK) out[j] = (row[j] - mean) * inv_std;
}
