// include/kffi/contract/details.h: the per-call check of a contract: the plan (contract/plan.h)
// run inline before the function, and the arguments the function receives.
//
// Only the common path of a passing call's check is compiled into each kernel: FastRun folds the
// checks of a tensor into a few compares for the leading run of same-rank tensors (unrolled; most
// contracts are one such run) and only says whether everything passed. Whatever follows that run
// (a tensor of another rank, a scalar, a tuple, an optional, a strided or ordered layout, ...) it
// hands to the runtime in one call (KFFIContractCheckFrom, src/contract_check.cc). When a check
// fails, the runtime runs the plan again from scratch, check by check in catalogue order, and
// raises the first failure with its message (KFFIContractExplain, src/contract_explain.cc). Both
// runs accept exactly the same arguments: they share their predicates (BindBits here, the others in
// src/contract_check.cc), and tests/cpp/contract/test_contract_fuzz.cc and the fuzzer
// tests/fuzz/contract_fuzzer.cc hold them to agreeing on every input.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTRACT_DETAILS_H_
#define KFFI_CONTRACT_DETAILS_H_

#include <kffi/contract/plan.h>
#include <kffi/tensor.h>

#include <cstring>
#include <type_traits>

// Unrolls the short per-dimension loops. nvcc's front end does not know the pragma (and would
// warn at every include); its host compiler unrolls constant-trip loops at -O2 anyway.
#if defined(__CUDACC__) || !defined(__GNUC__)
#define KFFI_CONTRACT_UNROLL_
#else
#define KFFI_CONTRACT_UNROLL_ _Pragma("GCC unroll 8")
#endif

namespace kffi {
namespace details {
namespace contract {

// ---- the checks ----------------------------------------------------------------------------
static_assert(kKFFITensorFlagReadOnly == 1, "the fast run shifts Op::mut into the flag's place");
// FastRun is the hot path (see the top of this file); the functions it shares with the
// runtime's explaining run say so.

KFFI_INLINE const DLTensor* TensorOf(const KFFIAny* v) { return TensorValuePtr(v); }

/// Mismatch bits of binding a symbol to v (0 when v passes its width and divisibility).
KFFI_INLINE uint64_t BindBits(const DimCheck& d, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  uint64_t bad = (((u + UINT64_C(0x80000000)) >> 32) & d.int32_mask) | (u & d.div_mask);
  if (KFFI_UNLIKELY((d.flags & kDimDivMod) != 0)) bad |= static_cast<uint64_t>(v % d.value);
  return bad;
}

/// Mismatch bits of one shape or stride entry v against its check. kDynamic: the symbol may be
/// first seen under an Optional (kDimBindOrMatch). Which branch runs is fixed per entry, so it
/// is predicted on every call after the first.
template <bool kDynamic>
KFFI_INLINE uint64_t DimBits(const DimCheck& d, int64_t v, RunState* st) {
  if (d.mode == kDimMatch ||
      (kDynamic && d.mode == kDimBindOrMatch && ((st->bound >> d.slot) & 1) != 0)) {
    return static_cast<uint64_t>(v ^ st->values[d.slot]);
  }
  if (d.mode == kDimLiteral) return static_cast<uint64_t>(v ^ d.value);
  if (kDynamic) st->bound |= UINT64_C(1) << d.slot;
  st->values[d.slot] = v;
  return d.flags != 0 ? BindBits(d, v) : 0;
}

/// Mismatch bits of n shape or stride entries against their checks. Without kDynamic the loop
/// makes no call, so the common case keeps everything in registers.
template <bool kDynamic>
KFFI_INLINE uint64_t DimsBits(const DimCheck* d, const int64_t* v, int32_t n, RunState* st) {
  uint64_t bad = 0;
  for (int32_t i = 0; i < n; ++i) bad |= DimBits<kDynamic>(d[i], v[i], st);
  return bad;
}
/// Mismatch bits of strides against compact row-major for shape sh (0: compact). Dimensions of
/// size 1 may have any stride; whether the tensor is empty (every layout fits) is only asked
/// after a mismatch. Unrolled where ndim is a constant.
KFFI_INLINE uint64_t RowMajorBitsOf(const int64_t* sh, const int64_t* strides, int32_t ndim) {
  uint64_t expected = 1;
  uint64_t bad = 0;
  KFFI_CONTRACT_UNROLL_
  for (int32_t k = ndim - 1; k >= 0; --k) {
    bad |= (static_cast<uint64_t>(strides[k]) ^ expected) & (sh[k] == 1 ? 0 : ~UINT64_C(0));
    expected *= static_cast<uint64_t>(sh[k]);
  }
  if (KFFI_UNLIKELY(bad != 0)) {
    for (int32_t k = 0; k < ndim; ++k) {
      if (sh[k] == 0) return 0;
    }
  }
  return bad;
}

/// The common `contiguous` check, in place: NULL strides, or compact row-major ones.
KFFI_INLINE bool RowMajorOk(const DLTensor* t) {
  return t->strides == nullptr || RowMajorBitsOf(t->shape, t->strides, t->ndim) == 0;
}

/// The checks of a tensor that run without any call: align, byte_offset, ndim and one or two
/// dtypes, one device type and the shared device index. Returns mismatch bits (0: fine).
KFFI_INLINE uint64_t HeadBits(const TensorCheck& c, const DLTensor* t, RunState* st) {
  // ndim and dtype are neighbours in a DLTensor, and so are the device type and index: one
  // 64-bit compare checks each pair.
  uint64_t head;
  std::memcpy(&head, &t->ndim, sizeof(head));
  uint64_t bad = ((reinterpret_cast<uintptr_t>(t->data) + t->byte_offset) & c.align_mask) |
                 (t->byte_offset & c.offset_mask);
  // Either allowed dtype: the smaller mismatch is 0 when one of them matches.
  const uint64_t miss1 = (head ^ c.ndim_dtype) & c.ndim_dtype_mask;
  const uint64_t miss2 = (head ^ c.ndim_dtype2) & c.ndim_dtype_mask;
  bad |= miss1 < miss2 ? miss1 : miss2;
  if (c.device_cmp_mask != 0) {
    uint64_t device;
    std::memcpy(&device, &t->device, sizeof(device));
    bad |=
        (device ^ (c.device_type | static_cast<uint64_t>(st->device_id) << 32)) & c.device_cmp_mask;
  }
  if (c.ref == kRefSet) st->device_id = t->device.device_id;
  return bad;
}

/// RowMajorOk for a tensor of kNdim dimensions whose shape is already in sh.
template <int kNdim>
KFFI_INLINE uint64_t RowMajorBits(const DLTensor* t, const int64_t* sh) {
  return t->strides == nullptr ? 0 : RowMajorBitsOf(sh, t->strides, kNdim);
}

/// The checks of a simple tensor of kNdim dimensions (the plan's ndim): straight-line code, no
/// loops. The shape is read once into locals (stores to the symbol values could otherwise alias
/// it).
template <int kNdim>
KFFI_INLINE bool SimpleTensorN(const PlanLayout& p, const TensorCheck& c, const DLTensor* t,
                               RunState* st) {
  if (KFFI_UNLIKELY(HeadBits(c, t, st) != 0)) return false;  // ndim checked: shape is readable
  const DimCheck* d = p.dims + c.dims_begin;
  int64_t sh[kNdim];
  KFFI_CONTRACT_UNROLL_
  for (int i = 0; i < kNdim; ++i) sh[i] = t->shape[i];
  uint64_t bad = 0;
  KFFI_CONTRACT_UNROLL_
  for (int i = 0; i < kNdim; ++i) bad |= DimBits<false>(d[i], sh[i], st);
  if (c.check_strides) bad |= RowMajorBits<kNdim>(t, sh);
  return bad == 0;
}

/// The first 8 bytes of a value: type_index, then tensor_flags (for a tensor argument).
KFFI_INLINE uint64_t HeadOf(const KFFIAny* v) {
  uint64_t head;
  std::memcpy(&head, v, sizeof(head));
  return head;
}

/// The leading PlanLayout::uniform_count arguments, all simple tensors of rank kNdim: true when
/// every one is a DLTensor* that passes. False sends the whole call to the runtime's check.
/// The type and, for a `mut` parameter, the read-only flag are checked in one compare.
template <int kNdim>
KFFI_INLINE bool UniformRun(const PlanLayout& p, const KFFIAny* args, RunState* st) {
  const TensorCheck* checks = p.tensors;
  const int32_t n = p.uniform_count;
  for (int32_t i = 0; i < n; ++i) {
    if (KFFI_UNLIKELY((HeadOf(args + i) & checks[i].arg_mask) != kKFFIDLTensorPtr)) return false;
    const auto* t = static_cast<const DLTensor*>(args[i].v_ptr);
    if (KFFI_UNLIKELY(!SimpleTensorN<kNdim>(p, checks[i], t, st))) return false;
  }
  return true;
}

/// Bit r set: FastRun compiles UniformRun<r> (r = 1..4); kAllRanks: all of them.
constexpr unsigned kAllRanks = 0x1eu;

/// The ranks a plan of contract text s can have as its uniform_ndim, as bits (see kAllRanks): the
/// number of entries of every bracketed list in s (a shape `[n, m]` has as many entries as its
/// tensor has dimensions). A superset: ranges and other lists only add bits, and text it cannot
/// follow gives kAllRanks. A missing bit would only send that plan's tensors to the runtime's
/// check (slower, never wrong).
constexpr unsigned RanksIn(const char* s) {
  constexpr int kMaxDepth = 8;
  int count[kMaxDepth] = {};      // entries ended so far, per open bracket
  bool nonempty[kMaxDepth] = {};  // whether the current entry has any text
  int depth = 0;
  unsigned mask = 0;
  for (; *s != '\0'; ++s) {
    const char c = *s;
    if (c == '[') {
      if (depth == kMaxDepth) return kAllRanks;
      if (depth > 0) nonempty[depth - 1] = true;
      count[depth] = 0;
      nonempty[depth] = false;
      ++depth;
    } else if (c == ']') {
      if (depth == 0) return kAllRanks;
      --depth;
      const int n = count[depth] + (nonempty[depth] ? 1 : 0);
      if (n >= 1 && n <= 4) mask |= 1u << n;
    } else if (depth > 0 && c == ',') {
      if (nonempty[depth - 1]) ++count[depth - 1];
      nonempty[depth - 1] = false;
    } else if (depth > 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      nonempty[depth - 1] = true;
    }
  }
  return depth == 0 ? mask : kAllRanks;
}

/// RanksIn(Text::get<>()) when that is a constant expression (the contract text of
/// KFFI_EXPORT_CONTRACT is a string literal), kAllRanks otherwise (text built at run time).
template <typename Text, typename = void>
struct RanksOf {
  static constexpr unsigned value = kAllRanks;
};
template <typename Text>
struct RanksOf<Text, std::enable_if_t<(RanksIn(Text::template get<>()), true)>> {
  static constexpr unsigned value = RanksIn(Text::template get<>());
};

/// Whether the call arguments pass every check. The leading run of same-rank tensors with plain
/// checks (PlanLayout::uniform_count of them) is checked inline, without any call, so that
/// everything stays in registers; the rest, or the whole call when that run does not pass as
/// DLTensor*s, goes to the runtime in one call. kRanks (RanksIn) names the uniform ranks worth
/// compiling: an export compiles only its contract's, which keeps a kernel's build shorter.
template <unsigned kRanks = kAllRanks>
KFFI_INLINE bool FastRun(const PlanLayout& p, const KFFIAny* args, int32_t num_args, RunState* st) {
  if (KFFI_UNLIKELY(num_args != p.num_args)) {
    st->failed_op = -1;
    return false;
  }
  st->frames[0] = args;
  const size_t n = static_cast<size_t>(p.num_ops);
  size_t first = 0;
  bool uniform = false;
  switch (p.uniform_ndim) {
    case 1:
      if constexpr ((kRanks & (1u << 1)) != 0) uniform = UniformRun<1>(p, args, st);
      break;
    case 2:
      if constexpr ((kRanks & (1u << 2)) != 0) uniform = UniformRun<2>(p, args, st);
      break;
    case 3:
      if constexpr ((kRanks & (1u << 3)) != 0) uniform = UniformRun<3>(p, args, st);
      break;
    case 4:
      if constexpr ((kRanks & (1u << 4)) != 0) uniform = UniformRun<4>(p, args, st);
      break;
    default:
      break;
  }
  if (uniform) first = static_cast<size_t>(p.uniform_count);
  if (first < n) {
    // The rest (tensors of another rank, Tensor objects, scalars, tuples, optionals, strided
    // layouts, ...): the runtime checks it in one call. Compiling a general loop into every
    // kernel instead cost a tenth of a contract export's build time.
    st->failed_op = KFFIContractCheckFrom(&p, st, static_cast<int32_t>(first));
    return st->failed_op < 0;
  }
  return true;
}

/// Raises the first failed check of a call whose FastRun failed: the runtime explains it
/// (KFFIContractExplain) and the error is thrown here, so that the caller's handler adds its
/// frame as for any error. Cold: only failing calls get here.
[[noreturn]] KFFI_NOINLINE inline void ThrowCheckFailure(const PlanLayout& p, const KFFIAny* args,
                                                         int32_t num_args) {
  KFFIContractExplain(p.contract, args, num_args, nullptr, nullptr);
  ThrowRaisedError(-1);
}

/// Checks the call arguments; throws the catalogue's error for the first failed check.
KFFI_INLINE void Run(const PlanLayout& p, const KFFIAny* args, int32_t num_args, RunState* st) {
  if (KFFI_UNLIKELY(!FastRun(p, args, num_args, st))) ThrowCheckFailure(p, args, num_args);
}

/// The function's arguments after a passing run (out has PlanLayout::num_fn_params slots): the
/// call arguments, with the environment stream in place of each EnvStream parameter and each
/// Stream argument as a pointer. The runtime writes them (KFFIContractExpandArgs): only functions
/// with a stream parameter pay for it. null_as_none: a packed function gets None for NULL (as kffi
/// passes null pointers), a typed C++ function an opaque pointer even when it is NULL.
inline void ExpandArgs(const PlanLayout& p, const RunState& st, KFFIAny* out, bool null_as_none) {
  if (KFFIContractExpandArgs(p.contract, st.frames, null_as_none ? 1 : 0, out) != 0) {
    ThrowRaisedError(-1);
  }
}

}  // namespace contract
}  // namespace details
}  // namespace kffi

#endif  // KFFI_CONTRACT_DETAILS_H_
