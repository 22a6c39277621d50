// safetensors — Hugging Face's tensor file format, our own small reader and writer.
//
// File: 8 bytes, little-endian uint64 N = the header's length; N bytes of JSON header, padded
// with spaces so that the data starts 8-byte aligned; then the data buffer. The header is one
// object: "__metadata__" (optional, string -> string) and for each tensor
//   "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// with begin/end byte offsets into the data buffer (row-major, little-endian); the tensors
// tile the buffer exactly, without gaps or overlaps.
// The writer writes F32 tensors in the order given, through data/files.h (a .tmp and a
// rename). The reader checks all of the above (sizes against dtype x shape, offsets inside the
// file, full coverage, element counts that fit 64 bits) and converts F32, F16 and BF16 to
// float; anything wrong is one error line naming the file (and the tensor). Data is copied as raw bytes: a little-endian host (x86, ARM) is assumed.
// Test: build/test_cpu --gtest_filter='Safetensors*'
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // prod(shape) floats
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata);

struct SafetensorsFile {
  struct Entry {
    std::string dtype;  // F32, F16, BF16, ... (others are listed but cannot be converted)
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // into data
  };
  std::string path;
  std::map<std::string, Entry> tensors;
  std::map<std::string, std::string> metadata;
  std::string data;  // the data buffer
  // The tensor as floats; throws naming the file when it is absent or of another dtype.
  std::vector<float> to_float(const std::string& name) const;
};
SafetensorsFile read_safetensors(const std::string& path);
// The header's "__metadata__" alone: reads the 8 + N header bytes, not the tensors' data.
// Throws as read_safetensors does for a file that is not safetensors.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
