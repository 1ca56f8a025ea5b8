; ModuleID = 'builtin.module'
source_filename = "align"
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define void @aligned(i8 %tag, { float, float, float, float } %q, { float, [12 x i8] } %p, float* %out, i64 %out.len) {
entry:
  %i32 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %i = zext i32 %i32 to i64
  %in = icmp ult i64 %i, %out.len
  br i1 %in, label %body, label %done
body:
  %t = uitofp i8 %tag to float
  %x = extractvalue { float, float, float, float } %q, 0
  %y = extractvalue { float, float, float, float } %q, 1
  %z = extractvalue { float, float, float, float } %q, 2
  %w = extractvalue { float, float, float, float } %q, 3
  %v = extractvalue { float, [12 x i8] } %p, 0
  %s1 = fadd float %t, %x
  %s2 = fadd float %s1, %y
  %s3 = fadd float %s2, %z
  %s4 = fadd float %s3, %w
  %s5 = fadd float %s4, %v
  %po = getelementptr float, float* %out, i64 %i
  store float %s5, float* %po, align 4
  br label %done
done:
  ret void
}

@llvm.used = appending global [1 x i8*] [i8* bitcast (void (i8, { float, float, float, float }, { float, [12 x i8] }, float*, i64)* @aligned to i8*)], section "llvm.metadata"

!nvvm.annotations = !{!0}
!0 = !{void (i8, { float, float, float, float }, { float, [12 x i8] }, float*, i64)* @aligned, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0, i32 3, i32 1}
