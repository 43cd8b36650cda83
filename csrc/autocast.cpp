// AutocastPrivateUse1: operators without an autocast policy fall through to
// the next dispatch key, so torch.autocast("oxide") never blocks an op.
// Per-operator policies (lower precision / fp32 / promote) are added here.
#include <torch/library.h>

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}
