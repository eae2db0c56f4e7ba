// A CUDA toolkit library opened at run time rather than linked (cuBLAS,
// NCCL: cublas_library.h, nccl_library.h): the dynamic linker's search
// first, then the toolkit's library folder this build was configured with.
#pragma once

#include <string>

namespace ds4::cuda {

// The handle (kept open for the process's life). ds4::Error "WHAT: cannot
// load NAME (dlopen's reason); HINT" when it cannot be had.
void* open_toolkit_library(const char* name, const char* what, const std::string& hint);

// The entry point `symbol` of the library `name` opened as `handle`;
// ds4::Error "WHAT: NAME lacks SYMBOL" when it has none.
void* toolkit_symbol(void* handle, const char* name, const char* what, const char* symbol);

template <typename F>
F toolkit_function(void* handle, const char* name, const char* what, const char* symbol) {
  return reinterpret_cast<F>(toolkit_symbol(handle, name, what, symbol));
}

}  // namespace ds4::cuda
