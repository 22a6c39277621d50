// safetensors.cpp — see safetensors.h.
#include "model/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "data/files.h"
#include "kernels/common.h"
#include "model/json.h"

namespace {

size_t dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = man;
    do { m <<= 1; e++; } while (!(m & 0x400));
    u = sign | ((uint32_t)(112 - e) << 23) | ((m & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The header length N from the first 8 bytes (little-endian), checked against the file size.
uint64_t header_length(const std::string& first8, size_t file_size, const char* p) {
  CHECK(first8.size() >= 8, "'%s' is not a safetensors file: %zu bytes, less than its 8-byte "
        "header length", p, first8.size());
  uint64_t n = 0;
  for (int b = 7; b >= 0; b--) n = n << 8 | (unsigned char)first8[b];
  CHECK(n >= 2 && n <= file_size - 8, "'%s' is not a safetensors file (or is truncated): its "
        "header length %llu does not fit its %zu bytes", p, (unsigned long long)n, file_size);
  return n;
}

Json parse_header(const std::string& header, const std::string& path) {
  const Json h = parse_json(header, path + " (safetensors header)");
  CHECK(h.kind == Json::Object, "'%s': the safetensors header is not a JSON object", path.c_str());
  return h;
}

std::map<std::string, std::string> metadata_of(const Json& v, const char* p) {
  CHECK(v.kind == Json::Object, "'%s': __metadata__ is not an object", p);
  std::map<std::string, std::string> m;
  for (const auto& [k, s] : v.members) {
    CHECK(s.kind == Json::String, "'%s': __metadata__ value '%s' is not a string", p, k.c_str());
    m[k] = s.str;
  }
  return m;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\": {";
    for (size_t i = 0; i < metadata.size(); i++)
      header += (i ? ", " : "") + json_quote(metadata[i].first) + ": " + json_quote(metadata[i].second);
    header += "}";
  }
  size_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    size_t n = 1;
    std::string shape;
    for (size_t k = 0; k < t.shape.size(); k++) {
      n *= (size_t)t.shape[k];
      shape += flashgpt::strformat("%s%lld", k ? ", " : "", (long long)t.shape[k]);
    }
    header += (header.size() > 1 ? ", " : "") + json_quote(t.name) +
              flashgpt::strformat(": {\"dtype\": \"F32\", \"shape\": [%s], \"data_offsets\": [%zu, %zu]}",
                                  shape.c_str(), offset, offset + 4 * n);
    offset += 4 * n;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t n = header.size();
  unsigned char len[8];
  for (int b = 0; b < 8; b++) len[b] = (unsigned char)(n >> (8 * b));  // little-endian
  write_file_atomically(path, [&](FILE* f) {
    bool ok = fwrite(len, 1, 8, f) == 8 && fwrite(header.data(), 1, header.size(), f) == header.size();
    for (const TensorToWrite& t : tensors) {
      size_t count = 1;
      for (int64_t d : t.shape) count *= (size_t)d;
      ok = ok && fwrite(t.data, sizeof(float), count, f) == count;
    }
    return ok;
  });
}


SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile st;
  st.path = path;
  const std::string bytes = read_file_bytes(path, "safetensors file");
  const char* p = path.c_str();
  const uint64_t n = header_length(bytes, bytes.size(), p);
  const Json h = parse_header(bytes.substr(8, n), path);
  st.data = bytes.substr(8 + n);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, v] : h.members) {
    if (name == "__metadata__") {
      st.metadata = metadata_of(v, p);
      continue;
    }
    const Json* dtype = v.find("dtype");
    const Json* shape = v.find("shape");
    const Json* offs = v.find("data_offsets");
    CHECK(v.kind == Json::Object && dtype && dtype->kind == Json::String && shape &&
              shape->kind == Json::Array && offs && offs->kind == Json::Array && offs->items.size() == 2,
          "'%s': tensor '%s' needs dtype, shape and data_offsets [begin, end]", p, name.c_str());
    SafetensorsFile::Entry e;
    e.dtype = dtype->str;
    const size_t es = dtype_bytes(e.dtype);
    CHECK(es > 0, "'%s': tensor '%s' has an unknown dtype '%s'", p, name.c_str(), e.dtype.c_str());
    size_t bytes_needed = es;  // dtype size x every dimension, which must not wrap 2^64
    for (const Json& d : shape->items) {
      CHECK(d.kind == Json::Number && d.number >= 0 && d.number == (double)(int64_t)d.number &&
                d.number < 1e15,
            "'%s': tensor '%s' has a bad shape", p, name.c_str());
      e.shape.push_back((int64_t)d.number);
      CHECK(!__builtin_mul_overflow(bytes_needed, (size_t)d.number, &bytes_needed),
            "'%s': tensor '%s' has a shape whose size overflows 64 bits; the file is corrupt",
            p, name.c_str());
    }
    for (const Json& o : offs->items)
      CHECK(o.kind == Json::Number && o.number >= 0 && o.number == (double)(int64_t)o.number,
            "'%s': tensor '%s' has bad data_offsets", p, name.c_str());
    e.begin = (size_t)offs->items[0].number;
    e.end = (size_t)offs->items[1].number;
    CHECK(e.begin <= e.end && e.end <= st.data.size(), "'%s': tensor '%s' lies outside the file "
          "(bytes %zu..%zu of %zu): the file is truncated", p, name.c_str(), e.begin, e.end,
          st.data.size());
    CHECK(e.end - e.begin == bytes_needed, "'%s': tensor '%s' has %zu bytes but its shape and "
          "dtype need %zu", p, name.c_str(), e.end - e.begin, bytes_needed);
    ranges.push_back({e.begin, e.end});
    st.tensors[name] = e;
  }
  std::sort(ranges.begin(), ranges.end());
  size_t at = 0;
  for (const auto& r : ranges) {
    CHECK(r.first == at, "'%s': the tensors' data_offsets %s at byte %zu", p,
          r.first < at ? "overlap" : "leave a gap", at);
    at = r.second;
  }
  CHECK(at == st.data.size(), "'%s': %zu bytes after the last tensor", p, st.data.size() - at);
  return st;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  const char* p = path.c_str();
  FILE* f = fopen(p, "rb");
  CHECK(f, "safetensors file '%s' cannot be read: %s", p, strerror(errno));
  std::unique_ptr<FILE, int (*)(FILE*)> closer(f, fclose);
  struct stat sb;
  CHECK(fstat(fileno(f), &sb) == 0, "safetensors file '%s': %s", p, strerror(errno));
  std::string head(8, '\0');
  head.resize(fread(&head[0], 1, 8, f));
  const uint64_t n = header_length(head, (size_t)sb.st_size, p);
  std::string header(n, '\0');
  CHECK(fread(&header[0], 1, n, f) == n, "'%s': read error in the safetensors header", p);
  const Json h = parse_header(header, path);
  const Json* meta = h.find("__metadata__");
  return meta ? metadata_of(*meta, p) : std::map<std::string, std::string>{};
}

std::vector<float> SafetensorsFile::to_float(const std::string& name) const {
  auto it = tensors.find(name);
  CHECK(it != tensors.end(), "'%s' has no tensor '%s'", path.c_str(), name.c_str());
  const Entry& e = it->second;
  const char* src = data.data() + e.begin;
  const size_t bytes = e.end - e.begin;
  std::vector<float> out;
  if (e.dtype == "F32") {
    out.resize(bytes / 4);
    std::memcpy(out.data(), src, bytes);
  } else if (e.dtype == "BF16" || e.dtype == "F16") {
    out.resize(bytes / 2);
    for (size_t i = 0; i < out.size(); i++) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      if (e.dtype == "BF16") {
        const uint32_t u = (uint32_t)h << 16;
        std::memcpy(&out[i], &u, 4);
      } else {
        out[i] = half_to_float(h);
      }
    }
  } else {
    THROW_ERROR("'%s': tensor '%s' is %s; flashgpt reads F32, F16 and BF16", path.c_str(), name.c_str(),
                e.dtype.c_str());
  }
  return out;
}
