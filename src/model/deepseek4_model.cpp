#include "model/deepseek4_model.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/file_map.h"

namespace ds4::model {

Deepseek4Model Deepseek4Model::open(const std::string& path, const LoadOptions& load) {
  gguf::File file = [&] {
    try {
      return load.partial_shards ? gguf::File::open_partial(path) : gguf::File::open(path);
    } catch (const Error& e) {
      // The reader names the tensor whose bytes are missing; say what that
      // usually means for a multi-GB weight file.
      const std::string what = e.what();
      if (what.find("past the end of the file") != std::string::npos)
        throw Error(what + " - the file is truncated (incomplete download or copy?)");
      throw;
    }
  }();
  Deepseek4Model model = bind(std::move(file));
  const std::vector<FileRange> ranges = load.stream_routed_experts ? model.non_routed_ranges() : model.file_ranges();
  auto each = [&](auto&& f) {
    for (const FileRange& r : ranges) f(r.bytes);
  };
  // The kernels stream the weights: 2 MiB pages wherever the kernel can.
  each([](auto r) { advise_pages(r, MapAccess::HugePages); });
  if (load.huge_pages) {
    each([](auto r) {
      advise_pages(r, MapAccess::WillNeed);
      prefault_pages(r);
    });
    uint64_t total = 0, huge = 0;
    each([&](auto r) {
      total += r.size();
      huge += ds4::huge_page_bytes(r);
    });
    if (huge < total / 10 * 9) {
      // Read again what the page cache held in small pages.
      for (const FileRange& r : ranges) {
        drop_cached_pages(r.bytes, *r.path);
        advise_pages(r.bytes, MapAccess::WillNeed);
        prefault_pages(r.bytes);
      }
    }
  }
  if (load.mlock) {
    // mlock reads every page in itself, so it also warms.
    for (const FileRange& r : ranges) {
      lock_pages(r.bytes, *r.path);
      model.locked_bytes_ += (r.bytes.size() + page_bytes() - 1) / page_bytes() * page_bytes();
    }
  } else if (load.stream_routed_experts) {
    // Streaming: every token needs the resident part, and the expert cache
    // must not push it out. Locked where the limit allows; else pageable.
    try {
      for (const FileRange& r : ranges) {
        lock_pages(r.bytes, *r.path, "");
        model.locked_bytes_ += (r.bytes.size() + page_bytes() - 1) / page_bytes() * page_bytes();
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "ds4: warning: --ssd-streaming: the resident weights stay pageable: %s\n", e.what());
      if (load.warm) each([](auto r) {
        advise_pages(r, MapAccess::WillNeed);
        prefault_pages(r);
      });
    }
  } else if (load.warm) {
    each([](auto r) {
      advise_pages(r, MapAccess::WillNeed);  // the whole file's reads are queued at once
      prefault_pages(r);
    });
  }
  return model;
}

std::vector<Deepseek4Model::FileRange> Deepseek4Model::file_ranges() const {
  std::vector<FileRange> out;
  for (const gguf::Shard& s : file_.shards()) out.push_back({s.bytes, &s.path});
  return out;
}

std::vector<Deepseek4Model::FileRange> Deepseek4Model::non_routed_ranges() const {
  const uint64_t page = page_bytes();
  std::vector<FileRange> out;
  for (const gguf::Shard& shard : file_.shards()) {
    const std::span<const uint8_t> all = shard.bytes;
    std::vector<std::pair<uint64_t, uint64_t>> experts;  // [begin, end) offsets, inner pages only
    for (const auto& l : weights_.layers) {
      for (const TensorView* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
        if (!t->present() || t->data < all.data() || t->data >= all.data() + all.size()) continue;
        const auto b = static_cast<uint64_t>(t->data - all.data());
        const uint64_t first = (b + page - 1) / page * page, end = (b + t->nbytes) / page * page;
        if (end > first) experts.emplace_back(first, end);  // no whole page: stays with its neighbours
      }
    }
    std::sort(experts.begin(), experts.end());
    uint64_t at = 0;
    for (const auto& [b, e] : experts) {
      if (b > at) out.push_back({all.subspan(at, b - at), &shard.path});
      at = std::max(at, e);
    }
    if (at < all.size()) out.push_back({all.subspan(at), &shard.path});
  }
  return out;
}

uint64_t Deepseek4Model::routed_expert_bytes() const {
  uint64_t n = 0;
  for (const auto& l : weights_.layers) n += l.ffn_gate_exps.nbytes + l.ffn_up_exps.nbytes + l.ffn_down_exps.nbytes;
  return n;
}

uint64_t Deepseek4Model::huge_page_bytes() const {
  uint64_t n = 0;
  for (const gguf::Shard& s : file_.shards()) n += ds4::huge_page_bytes(s.bytes);
  return n;
}

Deepseek4Model Deepseek4Model::bind(gguf::File file) {
  Deepseek4Config config = read_config(file);
  Deepseek4Weights weights = bind_weights(file, config);
  return Deepseek4Model(std::move(file), std::move(config), std::move(weights));
}

}  // namespace ds4::model
