"""The int4 dequantization in PTX that both int4 kernels of the library run (``kernels.int4_matmul``'s
``DEQ`` 3 in Triton, ``kernels.gluon_int4`` in Gluon), as constexprs a kernel reads: the bit trick of
FasterTransformer's and Marlin's kernels (Frantar et al. 2024), four bytes of a 32-bit word at a time.
``kernels.int4_matmul``'s docstring explains it."""

import triton.language as tl

__all__ = ["MAGIC16", "MAGIC_BF16", "DEQ3_ASM_FP16", "DEQ3_ASM_BF16", "DEQ3_CONSTRAINTS_FP16", "DEQ3_CONSTRAINTS_BF16"]

#: The magic words of ``DEQ`` 3, two halves each: 1024 + 8 in fp16, 128 + 8 in bf16.
MAGIC16 = tl.constexpr(0x64086408)
MAGIC_BF16 = tl.constexpr(0x43084308)

#: ``DEQ`` 3's PTX for fp16 and bf16: four bytes of one 32-bit word in (``$4``), their low values out in
#: ``$0``-``$1`` and their high values in ``$2``-``$3``, two 16-bit halves a register, in the bytes'
#: order (``inline_asm_elementwise`` with ``pack=4``). fp16 takes the magic words, 1/16 and -72 as ``$5``,
#: ``$9`` and ``$13`` (four registers each); bf16 the magic word as ``$5``. ``kernels.int4_matmul`` (Triton)
#: and ``kernels.gluon_int4`` (Gluon) run the same.
DEQ3_ASM_FP16 = tl.constexpr("""{
                .reg .b32 t, s, a;
                prmt.b32 t, $4, 0, 0x3120;
                shr.u32 s, t, 8;
                lop3.b32 a, t, 0x000f000f, 0x64086408, 0x6a; sub.f16x2 $0, a, $5;
                lop3.b32 a, s, 0x000f000f, 0x64086408, 0x6a; sub.f16x2 $1, a, $5;
                lop3.b32 a, t, 0x00f000f0, 0x64806480, 0x6a; fma.rn.f16x2 $2, a, $9, $13;
                lop3.b32 a, s, 0x00f000f0, 0x64806480, 0x6a; fma.rn.f16x2 $3, a, $9, $13;
                }""")
DEQ3_ASM_BF16 = tl.constexpr("""{
                .reg .b32 t, a;
                prmt.b32 t, $4, 0, 0x3120;
                lop3.b32 a, t, 0x000f000f, 0x43084308, 0x6a; sub.bf16x2 $0, a, $5;
                shr.u32 t, t, 4;
                lop3.b32 a, t, 0x000f000f, 0x43084308, 0x6a; sub.bf16x2 $2, a, $5;
                shr.u32 t, t, 4;
                lop3.b32 a, t, 0x000f000f, 0x43084308, 0x6a; sub.bf16x2 $1, a, $5;
                shr.u32 t, t, 4;
                lop3.b32 a, t, 0x000f000f, 0x43084308, 0x6a; sub.bf16x2 $3, a, $5;
                }""")
DEQ3_CONSTRAINTS_FP16 = tl.constexpr("=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r,r,r,r")
DEQ3_CONSTRAINTS_BF16 = tl.constexpr("=r,=r,=r,=r,r,r,r,r,r")
