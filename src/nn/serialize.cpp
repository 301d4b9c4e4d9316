#include "mixprec/nn/serialize.h"

namespace mixprec::nn {

void save(const Module& module, const std::string& path, const io::SafetensorsMetadata& metadata) {
  NamedTensors state;
  for (auto& [name, t] : module.state_dict())
    if (t.defined()) state.emplace_back(name, t.detach());
  io::save_safetensors(path, state, metadata);
}

void load(Module& module, const std::string& path, bool strict) {
  module.load_state_dict(io::load_safetensors(path), strict);
}

}  // namespace mixprec::nn
