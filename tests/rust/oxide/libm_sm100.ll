; The IR of libm.ll in the dialect cuda-oxide writes for sm_100 and newer (libNVVM's modern
; LLVM: opaque pointers, !nvvmir.version 2.0.3.2); assembled to bitcode by the tests.
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

define void @wave(ptr %x, i64 %x.len, ptr %y, i64 %y.len, float %a, float %b) {
entry:
  %i = call i64 @index_1d()
  %in = icmp ult i64 %i, %y.len
  br i1 %in, label %body, label %done
body:
  %px = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %px, align 4
  %s = call float @__nv_sinf(float %v)
  %e = call float @__nv_expf(float %v)
  %as = fmul float %a, %s
  %sum = fadd float %as, %e
  %r = fmul float %sum, %b
  %py = getelementptr float, ptr %y, i64 %i
  store float %r, ptr %py, align 4
  br label %done
done:
  ret void
}

define void @polar(ptr %xy, i64 %xy.len, ptr %out, i64 %out.len) {
entry:
  %i = call i64 @index_1d()
  %in = icmp ult i64 %i, %out.len
  br i1 %in, label %body, label %done
body:
  %px = getelementptr [2 x float], ptr %xy, i64 %i, i32 0
  %py = getelementptr [2 x float], ptr %xy, i64 %i, i32 1
  %x = load float, ptr %px, align 4
  %y = load float, ptr %py, align 4
  %xx = fmul float %x, %x
  %yy = fmul float %y, %y
  %rr = fadd float %xx, %yy
  %r = call float @__nv_sqrtf(float %rr)
  %t = call float @__nv_atan2f(float %y, float %x)
  %pr = getelementptr [2 x float], ptr %out, i64 %i, i32 0
  %pt = getelementptr [2 x float], ptr %out, i64 %i, i32 1
  store float %r, ptr %pr, align 4
  store float %t, ptr %pt, align 4
  br label %done
done:
  ret void
}

define void @biased(ptr %x, i64 %x.len, ptr %y, i64 %y.len) {
entry:
  %i = call i64 @index_1d()
  %in = icmp ult i64 %i, %y.len
  br i1 %in, label %body, label %done
body:
  %px = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %px, align 4
  %b = load float, ptr addrspace(4) @cuda_oxide_const_246e25db_BIAS, align 4
  %s = fadd float %v, %b
  %py = getelementptr float, ptr %y, i64 %i
  store float %s, ptr %py, align 4
  br label %done
done:
  ret void
}

@llvm.used = appending global [5 x ptr] [ptr @affine, ptr @wave, ptr @polar, ptr @biased, ptr addrspacecast (ptr addrspace(4) @cuda_oxide_const_246e25db_BIAS to ptr)], section "llvm.metadata"

!nvvm.annotations = !{!0, !1, !2}
!0 = !{ptr @wave, !"kernel", i32 1}
!1 = !{ptr @polar, !"kernel", i32 1}
!2 = !{ptr @biased, !"kernel", i32 1}
!nvvmir.version = !{!3}
!3 = !{i32 2, i32 0, i32 3, i32 2}
