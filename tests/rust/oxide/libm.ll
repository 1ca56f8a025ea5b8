; ModuleID = 'builtin.module'
source_filename = "libm"
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@cuda_oxide_const_246e25db_BIAS = addrspace(4) global float 0.0, align 4

declare float @__nv_sinf(float)
declare float @__nv_expf(float)
declare float @__nv_sqrtf(float)
declare float @__nv_atan2f(float, float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define internal i64 @index_1d() alwaysinline {
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %cta = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %cta, %ntid
  %i = add i32 %base, %tid
  %wide = zext i32 %i to i64
  ret i64 %wide
}

define float @affine(float %line.slope, float %line.offset, float %x) {
  %scaled = fmul float %line.slope, %x
  %sum = fadd float %scaled, %line.offset
  ret float %sum
}

define void @wave(float* %x, i64 %x.len, float* %y, i64 %y.len, float %a, float %b) {
entry:
  %i = call i64 @index_1d()
  %in = icmp ult i64 %i, %y.len
  br i1 %in, label %body, label %done
body:
  %px = getelementptr float, float* %x, i64 %i
  %v = load float, float* %px, align 4
  %s = call float @__nv_sinf(float %v)
  %e = call float @__nv_expf(float %v)
  %as = fmul float %a, %s
  %sum = fadd float %as, %e
  %r = fmul float %sum, %b
  %py = getelementptr float, float* %y, i64 %i
  store float %r, float* %py, align 4
  br label %done
done:
  ret void
}

define void @polar([2 x float]* %xy, i64 %xy.len, [2 x float]* %out, i64 %out.len) {
entry:
  %i = call i64 @index_1d()
  %in = icmp ult i64 %i, %out.len
  br i1 %in, label %body, label %done
body:
  %px = getelementptr [2 x float], [2 x float]* %xy, i64 %i, i32 0
  %py = getelementptr [2 x float], [2 x float]* %xy, i64 %i, i32 1
  %x = load float, float* %px, align 4
  %y = load float, float* %py, align 4
  %xx = fmul float %x, %x
  %yy = fmul float %y, %y
  %rr = fadd float %xx, %yy
  %r = call float @__nv_sqrtf(float %rr)
  %t = call float @__nv_atan2f(float %y, float %x)
  %pr = getelementptr [2 x float], [2 x float]* %out, i64 %i, i32 0
  %pt = getelementptr [2 x float], [2 x float]* %out, i64 %i, i32 1
  store float %r, float* %pr, align 4
  store float %t, float* %pt, align 4
  br label %done
done:
  ret void
}

define void @biased(float* %x, i64 %x.len, float* %y, i64 %y.len) {
entry:
  %i = call i64 @index_1d()
  %in = icmp ult i64 %i, %y.len
  br i1 %in, label %body, label %done
body:
  %px = getelementptr float, float* %x, i64 %i
  %v = load float, float* %px, align 4
  %b = load float, float addrspace(4)* @cuda_oxide_const_246e25db_BIAS, align 4
  %s = fadd float %v, %b
  %py = getelementptr float, float* %y, i64 %i
  store float %s, float* %py, align 4
  br label %done
done:
  ret void
}

@llvm.used = appending global [5 x i8*] [i8* bitcast (float (float, float, float)* @affine to i8*), i8* bitcast (void (float*, i64, float*, i64, float, float)* @wave to i8*), i8* bitcast (void ([2 x float]*, i64, [2 x float]*, i64)* @polar to i8*), i8* bitcast (void (float*, i64, float*, i64)* @biased to i8*), i8* addrspacecast (float addrspace(4)* @cuda_oxide_const_246e25db_BIAS to i8*)], section "llvm.metadata"

!nvvm.annotations = !{!0, !1, !2}
!0 = !{void (float*, i64, float*, i64, float, float)* @wave, !"kernel", i32 1}
!1 = !{void ([2 x float]*, i64, [2 x float]*, i64)* @polar, !"kernel", i32 1}
!2 = !{void (float*, i64, float*, i64)* @biased, !"kernel", i32 1}
!nvvmir.version = !{!3}
!3 = !{i32 2, i32 0, i32 3, i32 1}
