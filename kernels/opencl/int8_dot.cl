// dot4_i8(a, b, acc): acc + the dot product of the four signed bytes packed into a and b
// (int32, exact), and dot16_i8 over the sixteen bytes of an int4. Three forms, chosen when
// the program is built (backends/opencl/int_dot_probe.h):
//  - STRATA_DP4A: NVIDIA's dp4a instruction through inline PTX. NVIDIA's OpenCL has no
//    integer dot product extension, but its compiler takes inline PTX; the backend defines
//    STRATA_DP4A only after a probe kernel built and computed the right answer on the device.
//  - cl_khr_integer_dot_product (OpenCL 3.0 feature macro): the packed built-in.
//  - otherwise plain int32 multiply-adds of the sign-extended bytes (PoCL, CI).
// STRATA_ASM: the inline-assembly keyword the device compiler takes (the probe tries
// __asm__, then asm).
#ifndef STRATA_ASM
#define STRATA_ASM __asm__
#endif

#if defined(STRATA_DP4A)
inline int dot4_i8(int a, int b, int acc) {
  int d;
  STRATA_ASM("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(acc));
  return d;
}
inline int dot16_i8(int4 a, int4 b, int acc) {
  return dot4_i8(a.w, b.w, dot4_i8(a.z, b.z, dot4_i8(a.y, b.y, dot4_i8(a.x, b.x, acc))));
}
#elif defined(__opencl_c_integer_dot_product_input_4x8bit_packed)
inline int dot4_i8(int a, int b, int acc) { return acc + dot_4x8packed_ss_int((uint)a, (uint)b); }
inline int dot16_i8(int4 a, int4 b, int acc) {
  return dot4_i8(a.w, b.w, dot4_i8(a.z, b.z, dot4_i8(a.y, b.y, dot4_i8(a.x, b.x, acc))));
}
#else
inline int dot4_i8(int a, int b, int acc) {
  const int4 p = convert_int4(as_char4(a)) * convert_int4(as_char4(b));
  return acc + (p.x + p.y) + (p.z + p.w);
}
// Sixteen lanes at once: vectorizes on CPU devices.
inline int dot16_i8(int4 a, int4 b, int acc) {
  const int16 p = convert_int16(as_char16(a)) * convert_int16(as_char16(b));
  const int8 h8 = p.lo + p.hi;
  const int4 h4 = h8.lo + h8.hi;
  return acc + (h4.x + h4.y) + (h4.z + h4.w);
}
#endif
