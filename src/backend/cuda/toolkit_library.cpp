#include "backend/cuda/toolkit_library.h"

#include <dlfcn.h>

#include "core/error.h"

namespace ds4::cuda {

void* open_toolkit_library(const char* name, const char* what, const std::string& hint) {
  if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first = dlerror();
#ifdef DS4_CUDA_LIB_DIR
  const std::string configured = std::string(DS4_CUDA_LIB_DIR) + "/" + name;
  if (void* handle = dlopen(configured.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
#endif
  throw Error(std::string(what) + ": cannot load " + name + " (" + first + "); " + hint);
}

void* toolkit_symbol(void* handle, const char* name, const char* what, const char* symbol) {
  void* p = dlsym(handle, symbol);
  if (p == nullptr) throw Error(std::string(what) + ": " + name + " lacks " + symbol);
  return p;
}

}  // namespace ds4::cuda
