#include "backend/gpu_placement.h"

#include <charconv>
#include <cmath>
#include <numeric>

#include "core/byte_size.h"
#include "core/error.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_memory.h"
#include "model/deepseek4_weights.h"

namespace ds4::backend {

namespace {

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return parts;
    start = comma + 1;
  }
}

std::string gpu_name(const GpuCapacity& gpu) { return "GPU " + std::to_string(gpu.device) + " (" + gpu.name + ")"; }

uint64_t sum(const std::vector<uint64_t>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end),
                         uint64_t{0});
}

// What a GPU may hold: its free memory less the reserve (auto), or the
// --gpu-vram size (ds4::Error when that is more than it has free).
uint64_t budget_of(const GpuCapacity& gpu, const VramBudget& vram, size_t g) {
  if (vram.gib.empty()) return gpu.free_bytes > kAutoVramReserve ? gpu.free_bytes - kAutoVramReserve : 0;
  const auto budget = static_cast<uint64_t>(vram.gib[g] * static_cast<double>(1ull << 30));
  if (budget > gpu.free_bytes)
    throw Error("--gpu-vram asks " + format_size(budget) + " of " + gpu_name(gpu) + ", which has " +
                format_size(gpu.free_bytes) + " free");
  return budget;
}

std::string layer_span(int begin, int end) { return std::to_string(begin) + "-" + std::to_string(end - 1); }

}  // namespace

std::vector<int> parse_gpu_devices(std::string_view list, int n_visible) {
  std::vector<int> devices;
  if (list == "all") {
    for (int i = 0; i < n_visible; ++i) devices.push_back(i);
    if (devices.empty()) throw Error("--gpu-devices all: no CUDA GPU is visible");
    return devices;
  }
  for (std::string_view part : split_commas(list)) {
    int value = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || value < 0)
      throw Error("--gpu-devices: '" + std::string(part) + "' in '" + std::string(list) +
                  "' is not a GPU number (expected a list such as 0,1 or all)");
    if (value >= n_visible)
      throw Error("--gpu-devices: GPU " + std::to_string(value) + " does not exist (" + std::to_string(n_visible) +
                  " visible" + (n_visible > 0 ? ": 0-" + std::to_string(n_visible - 1) : std::string()) + ")");
    for (int seen : devices)
      if (seen == value) throw Error("--gpu-devices: GPU " + std::to_string(value) + " is listed twice");
    devices.push_back(value);
  }
  return devices;
}

VramBudget parse_gpu_vram(std::string_view text) {
  VramBudget budget;
  if (text == "auto") return budget;
  for (std::string_view part : split_commas(text)) {
    double gib = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), gib);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || !(gib > 0) || !std::isfinite(gib))
      throw Error("--gpu-vram: '" + std::string(part) + "' in '" + std::string(text) +
                  "' is not a size in GiB (expected auto, or one size per GPU such as 24,24)");
    budget.gib.push_back(gib);
  }
  return budget;
}

PlacementRequest placement_request(const model::Deepseek4Weights& weights, const model::Deepseek4HParams& hp,
                                   uint64_t n_ctx, uint32_t kv_elem_bytes, uint64_t scratch_bytes) {
  PlacementRequest request;
  for (const model::LayerWeights& layer : weights.layers) {
    uint64_t bytes = model::kv_layer_state_bytes(hp, layer.index, n_ctx, kv_elem_bytes).total();
    for (const model::TensorView* t : layer.all()) bytes += t->nbytes;
    request.layer_bytes.push_back(bytes);
    // The odd experts: n_expert / 2 of them, each 1 / n_expert of a tensor.
    uint64_t partner = 0;
    if (hp.n_expert > 0)
      for (const model::TensorView* t : {&layer.ffn_gate_exps, &layer.ffn_up_exps, &layer.ffn_down_exps})
        partner += t->nbytes / hp.n_expert * (hp.n_expert / 2);
    request.layer_partner_bytes.push_back(partner);
  }
  request.input_bytes = weights.token_embd.nbytes;
  for (const model::TensorView* t : {&weights.output_hc_fn, &weights.output_hc_base, &weights.output_hc_scale,
                                     &weights.output_norm, &weights.output})
    request.output_bytes += t->nbytes;
  request.scratch_bytes = scratch_bytes;
  return request;
}

std::vector<GpuShare> place_layers(const PlacementRequest& request, const std::vector<GpuCapacity>& gpus,
                                   const VramBudget& vram) {
  if (gpus.empty()) throw Error("GPU placement: no GPU to place the layers on");
  if (!vram.gib.empty() && vram.gib.size() != gpus.size())
    throw Error("--gpu-vram gives " + std::to_string(vram.gib.size()) + " sizes for " + std::to_string(gpus.size()) +
                " GPUs");
  const size_t n_gpu = gpus.size();
  const size_t n_layer = request.layer_bytes.size();

  // Each GPU's budget, and what is left of it for the model after scratch.
  std::vector<GpuShare> shares(n_gpu);
  std::vector<uint64_t> room(n_gpu, 0);
  for (size_t g = 0; g < n_gpu; ++g) {
    shares[g].device = gpus[g].device;
    shares[g].name = gpus[g].name;
    const uint64_t budget = budget_of(gpus[g], vram, g);
    shares[g].budget = budget;
    room[g] = budget > request.scratch_bytes ? budget - request.scratch_bytes : 0;
  }

  const uint64_t need = sum(request.layer_bytes, 0, n_layer) + request.input_bytes + request.output_bytes;
  const uint64_t total_room = std::accumulate(room.begin(), room.end(), uint64_t{0});
  if (need > total_room) {
    std::string held;
    for (size_t g = 0; g < n_gpu; ++g)
      held += (g ? ", " : "") + gpu_name(gpus[g]) + " " + format_size(room[g]);
    throw Error("the model does not fit on the GPUs: its layers, embedding and output head need " + format_size(need) +
                " with this context, the GPUs hold " + format_size(total_room) + " after " +
                format_size(request.scratch_bytes) + " of scratch each (" + held + "): short by " +
                format_size(need - total_room));
  }

  // Walk the layers in order; GPU g takes layers while it is below its
  // proportional share of the whole and they fit in its room. The last GPU
  // used takes the output head with the last layer.
  size_t layer = 0;
  uint64_t placed = 0;  // bytes placed on earlier GPUs and this one
  double share_end = 0;
  for (size_t g = 0; g < n_gpu; ++g) {
    GpuShare& share = shares[g];
    share_end += static_cast<double>(need) * static_cast<double>(room[g]) / static_cast<double>(total_room);
    uint64_t used = 0;
    if (g == 0) {
      share.input = true;
      used += request.input_bytes;
      if (used > room[0])
        throw Error("the token embedding (" + format_size(request.input_bytes) + ") does not fit on " +
                    gpu_name(gpus[0]) + ", which holds " + format_size(room[0]) + " after scratch");
    }
    uint64_t later_room = 0;
    for (size_t h = g + 1; h < n_gpu; ++h) later_room += room[h];
    share.layer_begin = share.layer_end = static_cast<int>(layer);
    const bool last_gpu = g + 1 == n_gpu;
    while (layer < n_layer) {
      const uint64_t next = request.layer_bytes[layer];
      const uint64_t with_head = layer + 1 == n_layer ? request.output_bytes : 0;
      if (used + next + with_head > room[g]) break;
      // Past its share by more than half this layer: leave the layer to the
      // next GPUs, when they can hold what is left.
      const uint64_t rest = sum(request.layer_bytes, layer, n_layer) + request.output_bytes;
      if (!last_gpu && used > 0 && static_cast<double>(placed + used) + static_cast<double>(next) / 2 > share_end &&
          rest <= later_room)
        break;
      used += next + with_head;
      ++layer;
    }
    share.layer_end = static_cast<int>(layer);
    if (layer == n_layer && share.layer_end > share.layer_begin) share.output = true;
    share.bytes = used + (used > 0 ? request.scratch_bytes : 0);
    placed += used;
    if (layer < n_layer && last_gpu) {
      const uint64_t rest = sum(request.layer_bytes, layer, n_layer) + request.output_bytes;
      throw Error("the model does not fit on the GPUs as whole layers: " + gpu_name(gpus[g]) + " would need " +
                  format_size(used + rest) + " for layers " + std::to_string(share.layer_begin) + "-" +
                  std::to_string(n_layer - 1) + " and the output head, it holds " + format_size(room[g]) +
                  " after scratch: short by " + format_size(used + rest - room[g]));
    }
  }
  if (n_layer == 0) shares[n_gpu - 1].output = true;
  return shares;
}

PairPlacement place_pairs(const PlacementRequest& request, const std::vector<GpuCapacity>& gpus, const VramBudget& vram,
                          bool one_gpu_pairs) {
  if (gpus.empty() || gpus.size() % 2 != 0)
    throw Error(
        "--gpu-tensor-parallel needs an even number of GPUs (homes first, then their partners in the same "
        "order), not " +
        std::to_string(gpus.size()));
  if (!vram.gib.empty() && vram.gib.size() != gpus.size())
    throw Error("--gpu-vram gives " + std::to_string(vram.gib.size()) + " sizes for " + std::to_string(gpus.size()) +
                " GPUs");
  if (request.layer_partner_bytes.size() != request.layer_bytes.size())
    throw Error("GPU placement: the request does not say what the partners hold");
  const size_t pairs = gpus.size() / 2;
  for (size_t i = 0; i < pairs; ++i)
    if (gpus[i].device == gpus[pairs + i].device && !one_gpu_pairs)
      throw Error("--gpu-tensor-parallel: " + gpu_name(gpus[i]) + " is paired with itself");
  // The homes hold each layer less its odd experts.
  PlacementRequest home_request = request;
  for (size_t l = 0; l < request.layer_bytes.size(); ++l) home_request.layer_bytes[l] -= request.layer_partner_bytes[l];
  const std::vector<GpuCapacity> homes(gpus.begin(), gpus.begin() + static_cast<std::ptrdiff_t>(pairs));
  VramBudget home_vram, partner_vram;
  if (!vram.gib.empty()) {
    home_vram.gib.assign(vram.gib.begin(), vram.gib.begin() + static_cast<std::ptrdiff_t>(pairs));
    partner_vram.gib.assign(vram.gib.begin() + static_cast<std::ptrdiff_t>(pairs), vram.gib.end());
  }
  PairPlacement placement;
  placement.homes = place_layers(home_request, homes, home_vram);
  for (size_t i = 0; i < pairs; ++i) {
    const GpuShare& home = placement.homes[i];
    const GpuCapacity& gpu = gpus[pairs + i];
    GpuShare partner;
    partner.device = gpu.device;
    partner.name = gpu.name;
    partner.partner_of = home.device;
    partner.layer_begin = home.layer_begin;
    partner.layer_end = home.layer_end;
    partner.budget = budget_of(gpu, partner_vram, i);
    const uint64_t experts =
        sum(request.layer_partner_bytes, static_cast<size_t>(home.layer_begin), static_cast<size_t>(home.layer_end));
    partner.bytes = home.layer_end > home.layer_begin ? experts + request.scratch_bytes : 0;
    if (partner.bytes > partner.budget)
      throw Error(gpu_name(gpu) + ", the partner of GPU " + std::to_string(home.device) +
                  ", would hold the odd routed experts of layers " + layer_span(home.layer_begin, home.layer_end) +
                  " and scratch, " + format_size(partner.bytes) + "; it holds " + format_size(partner.budget) +
                  ": short by " + format_size(partner.bytes - partner.budget));
    placement.partners.push_back(partner);
  }
  return placement;
}

std::string describe(const GpuShare& share) {
  std::string line = "GPU " + std::to_string(share.device) + " (" + share.name + "): ";
  if (share.partner_of >= 0) {
    line += share.layer_end > share.layer_begin
                ? "odd routed experts of layers " + layer_span(share.layer_begin, share.layer_end)
                : std::string("no layers");
    return line + " (partner of GPU " + std::to_string(share.partner_of) + "), " + format_size(share.bytes) + " of " +
           format_size(share.budget);
  }
  if (share.layer_end > share.layer_begin)
    line += "layers " + std::to_string(share.layer_begin) + "-" + std::to_string(share.layer_end - 1);
  else
    line += "no layers";
  if (share.input) line += ", token embedding";
  if (share.output) line += ", output head";
  return line + ", " + format_size(share.bytes) + " of " + format_size(share.budget);
}

}  // namespace ds4::backend
