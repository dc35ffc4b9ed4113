// tests/python/kernels/record_hostile_kernels.cc: a record type with a field of its own type, for
// nesting that is too deep or holds itself (tests/python/hostile/test_hostile_records.py).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cstdint>

namespace {

class NodeObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("hostile.Node", NodeObj, kffi::Object)
  int64_t v = 0;
  kffi::ObjectPtr<NodeObj> next;  // None ends the chain
};
KFFI_OBJECT_DEF(NodeObj).field_rw("v", &NodeObj::v).field_rw("next", &NodeObj::next);

/// How many nodes the chain has.
int64_t Depth(kffi::ObjectPtr<NodeObj> n) {
  int64_t d = 0;
  for (; n; n = n->next) ++d;
  return d;
}

/// The nodes of a list of chains, all together.
int64_t TotalDepth(kffi::Array<kffi::ObjectPtr<NodeObj>> chains) {
  int64_t d = 0;
  for (const auto& c : chains) d += Depth(c);
  return d;
}

}  // namespace

KFFI_EXPORT_DOC(depth, Depth, "", "n");
KFFI_EXPORT_DOC(total_depth, TotalDepth, "", "chains");
