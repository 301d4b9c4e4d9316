#include "mixprec/io/module_file.h"

namespace mixprec::io {

void save_module(const nn::Module& module, const std::string& path,
                 const SafetensorsMetadata& metadata) {
  NamedTensors state;
  for (auto& [name, t] : module.state_dict())
    if (t.defined()) state.emplace_back(name, t.detach());
  save_safetensors(path, state, metadata);
}

void load_module(nn::Module& module, const std::string& path, bool strict) {
  module.load_state_dict(load_safetensors(path), strict);
}

}  // namespace mixprec::io
