; ModuleID = 'builtin.module'
source_filename = "opaque"
target datalayout = "e-p:64:64:64-p3:32:32:32-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-f128:128:128-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64-a:8:8"
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_expf(float)
declare float @__nv_log1pf(float)
declare float @__nv_powf(float, float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define internal i64 @index_1d() alwaysinline {
bb0:
  %v0 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v1 = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %v2 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %v3 = mul i32 %v1, %v2
  %v4 = add i32 %v3, %v0
  %v5 = zext i32 %v4 to i64
  ret i64 %v5
}

define void @softplus(ptr %v0, i64 %v1, ptr %v2, i64 %v3) {
bb0:
  %v4 = call i64 @index_1d()
  %v5 = icmp ult i64 %v4, %v3
  br i1 %v5, label %bb1, label %bb2
bb1:
  %v6 = getelementptr inbounds float, ptr %v0, i64 %v4
  %v7 = load float, ptr %v6, align 4
  %v8 = call float @__nv_expf(float %v7)
  %v9 = call float @__nv_log1pf(float %v8)
  %v10 = getelementptr inbounds float, ptr %v2, i64 %v4
  store float %v9, ptr %v10, align 4
  br label %bb2
bb2:
  ret void
}

define void @powscale(ptr %v0, i64 %v1, ptr %v2, i64 %v3, float %v4, double %v5) {
bb0:
  %v6 = call i64 @index_1d()
  %v7 = icmp ult i64 %v6, %v3
  br i1 %v7, label %bb1, label %bb2
bb1:
  %v8 = getelementptr inbounds float, ptr %v0, i64 %v6
  %v9 = load float, ptr %v8, align 4
  %v10 = call float @__nv_powf(float %v9, float %v4)
  %v11 = fpext float %v10 to double
  %v12 = fmul double %v11, %v5
  %v13 = fptrunc double %v12 to float
  %v14 = getelementptr inbounds float, ptr %v2, i64 %v6
  store float %v13, ptr %v14, align 4
  br label %bb2
bb2:
  ret void
}

@llvm.used = appending global [2 x ptr] [ptr @softplus, ptr @powscale], section "llvm.metadata"

!nvvm.annotations = !{!0, !1, !2, !3, !4}
!0 = !{ptr @softplus, !"kernel", i32 1}
!1 = !{ptr @powscale, !"kernel", i32 1}
!2 = !{ptr @powscale, !"maxntidx", i32 256}
!3 = !{ptr @powscale, !"maxntidy", i32 1}
!4 = !{ptr @powscale, !"maxntidz", i32 1}
