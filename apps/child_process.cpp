#include "child_process.h"

#include <cstdio>
#include <memory>

#include "mixprec/core/error.h"

namespace mixprec::app {

std::string run_and_capture(const std::string& command, std::string_view who) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw Error("[" + std::string(who) + "] could not run " + command);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe.get()) != nullptr) out += buf;
  if (pclose(pipe.release()) != 0) throw Error("[" + std::string(who) + "] failed: " + command);
  return out;
}

const io::JsonValue& json_member(const io::JsonValue& object, std::string_view key,
                                 std::string_view who) {
  const io::JsonValue* v = object.is_object() ? object.find(key) : nullptr;
  if (v == nullptr)
    throw Error("[" + std::string(who) + "] result has no '" + std::string(key) + "'");
  return *v;
}

}  // namespace mixprec::app
