// Where the layers go on the GPUs (--backend cuda): the --gpu-devices and
// --gpu-vram options, and whole layers per GPU by their footprint (weights
// plus the context's KV state), with scratch reserved on every GPU. A layout
// that does not fit is refused before anything is loaded, naming the GPU and
// the shortfall. Plain host logic: no CUDA here, the caller lists the GPUs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::model {
struct Deepseek4HParams;
struct Deepseek4Weights;
}  // namespace ds4::model

namespace ds4::backend {

// One GPU as the placement sees it.
struct GpuCapacity {
  int device = 0;
  std::string name;
  uint64_t free_bytes = 0;
};

// --gpu-devices: "0", "0,2", "all" -> device numbers among n_visible, in the
// order given; ds4::Error on a malformed list, a number out of range or a
// repeat.
std::vector<int> parse_gpu_devices(std::string_view list, int n_visible);

// --gpu-vram: "auto" (each GPU's free memory less a reserve) or one size in
// GiB per chosen GPU ("24,24", "70.5"). Empty `gib`: auto.
struct VramBudget {
  std::vector<double> gib;
};
VramBudget parse_gpu_vram(std::string_view text);

// What one model and context need, layer by layer.
struct PlacementRequest {
  std::vector<uint64_t> layer_bytes;  // weights + KV state of each layer
  // Of layer_bytes, the routed experts a tensor-parallel partner holds
  // (backend::TensorShare rank 1 of 2: the odd experts of the three tensors).
  std::vector<uint64_t> layer_partner_bytes;
  uint64_t input_bytes = 0;           // token embedding: on the first GPU used
  uint64_t output_bytes = 0;          // output norm, HC head, vocab projection: with the last layer
  uint64_t scratch_bytes = 0;         // activations and kernel scratch, on every GPU used
};

// The request for a bound model with a context of n_ctx tokens: each layer's
// tensors plus its KV state (model::kv_layer_state_bytes, cached rows of
// kv_elem_bytes), the token embedding, and the output head's tensors (HC
// head, norm, vocab projection). Reads only the tensor table.
PlacementRequest placement_request(const model::Deepseek4Weights& weights, const model::Deepseek4HParams& hp,
                                   uint64_t n_ctx, uint32_t kv_elem_bytes, uint64_t scratch_bytes);

struct GpuShare {
  int device = 0;
  std::string name;
  int layer_begin = 0, layer_end = 0;  // [begin, end); empty when the GPU gets none
  bool input = false, output = false;
  int partner_of = -1;  // tensor parallel: the home GPU whose layers' odd experts this one holds
  uint64_t bytes = 0;   // what it will hold, scratch included
  uint64_t budget = 0;  // what it may hold
};

// Memory left free on each GPU under --gpu-vram auto (the driver's, other
// processes' and fragmentation's share).
inline constexpr uint64_t kAutoVramReserve = 512ull << 20;

// Contiguous layer ranges, each GPU's share of the layers in proportion to
// its budget, so the GPUs fill alike. ds4::Error (one line) when the model
// does not fit: the total short, or the GPU whose share cannot hold its
// layers and by how much. GPUs are taken in the order given.
std::vector<GpuShare> place_layers(const PlacementRequest& request, const std::vector<GpuCapacity>& gpus,
                                   const VramBudget& vram);

// Tensor parallel in pairs (--gpu-tensor-parallel, ds4's
// --cuda-tensor-parallel): the first half of `gpus` are homes, the second
// half their partners in the same order (list the closest peer GPUs at
// matching places). The homes take whole layers as place_layers places them,
// less the routed experts their partners hold; each partner holds the odd
// routed experts of its home's layers (and scratch). ds4::Error (one line)
// for an odd count, a --gpu-vram list of another length, or a partner that
// cannot hold its share (naming it, its home and the shortfall).
struct PairPlacement {
  std::vector<GpuShare> homes, partners;  // partners[i] pairs with homes[i]
};
// one_gpu_pairs: a home may be its own partner (tests' stand-in where one
// GPU is all there is; the caller halves its free memory between the two).
PairPlacement place_pairs(const PlacementRequest& request, const std::vector<GpuCapacity>& gpus, const VramBudget& vram,
                          bool one_gpu_pairs = false);

// "GPU 0 (NVIDIA H100): layers 0-20, token embedding, 40.20 GiB of 78.50 GiB";
// a partner: "GPU 1 (NVIDIA H100): odd routed experts of layers 0-20 (partner
// of GPU 0), 36.00 GiB of 78.50 GiB"
std::string describe(const GpuShare& share);

}  // namespace ds4::backend
