// output_files.cpp — see output_files.h.
#include "model/output_files.h"

#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstring>

#include "data/files.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"
#include "model/json.h"
#include "model/safetensors.h"

namespace {

// Up to `limit` bytes from the start of path ("" when it cannot be read).
std::string file_head(const std::string& path, size_t limit) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string s(limit, '\0');
  s.resize(fread(&s[0], 1, limit, f));
  fclose(f);
  return s;
}

int32_t first_int32(const std::string& path) {
  const std::string b = file_head(path, 4);
  int32_t magic = 0;
  if (b.size() == 4) memcpy(&magic, b.data(), 4);
  return magic;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A whole (small) file parsed as JSON; Null when it is not JSON or over 1 MiB.
Json small_json_file(const std::string& path) {
  const size_t kMax = 1 << 20;
  const std::string text = file_head(path, kMax + 1);
  if (text.size() > kMax) return Json{};
  try {
    return parse_json(text, path);
  } catch (const flashgpt::Error&) {
    return Json{};
  }
}

// What an existing file is, for a refusal ("a token shard", ...).
std::string describe_file(const std::string& path) {
  const int32_t magic = first_int32(path);
  if (magic == kShardMagic) return "a token shard";
  if (magic == kModelMagic) return "a model checkpoint";
  if (magic == (int32_t)kStateMagic) return "an optimizer-state file";
  if (magic == kTokenizerMagic || magic == kLlmcTokenizerMagic) return "a tokenizer file";
  try {
    read_safetensors_metadata(path);
    return "a safetensors model";
  } catch (const flashgpt::Error&) {
  }
  if (small_json_file(path).kind == Json::Object) return "a JSON file";
  return "a file";
}

// train --log: every line is one of train's step records (a few hundred bytes); a last line cut
// short (a crash mid-write, no '\n') may hold any start of one. Read line by line, so that a
// large file of another kind is rejected at its first line.
bool is_train_log(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return false;
  const std::string start = "{\"step\": ";
  char buf[4096];
  bool ok = true;
  while (ok && fgets(buf, sizeof buf, f)) {
    const size_t n = strlen(buf);
    const bool complete = n > 0 && buf[n - 1] == '\n';
    const std::string line(buf, complete ? n - 1 : n);
    if (!complete) {  // the last line, one too long to be a record, or a NUL byte
      ok = fgetc(f) == EOF && (starts_with(start, line) || starts_with(line, start));
      break;
    }
    ok = starts_with(line, start) && line.size() > start.size() &&
         isdigit((unsigned char)line[start.size()]) && line.back() == '}';
  }
  fclose(f);
  return ok;
}

bool is_train_lock(const std::string& path) {
  const std::string text = file_head(path, 256);
  int pid = 0, end = 0;
  return sscanf(text.c_str(), "pid %d on %*[^\n]%n", &pid, &end) == 1 && end > 0 &&
         text.size() == (size_t)end + 1 && text.back() == '\n';
}

bool is_eval_json(const std::string& path) {
  const Json j = small_json_file(path);
  const Json* producer = j.kind == Json::Object ? j.find("producer") : nullptr;
  return producer && producer->kind == Json::String && producer->str == kEvalJsonProducer;
}

bool is_hf_export(const std::string& safetensors_path) {
  try {
    const auto meta = read_safetensors_metadata(safetensors_path);
    auto it = meta.find("producer");
    return it != meta.end() && it->second == kHfExportProducer;
  } catch (const flashgpt::Error&) {
    return false;
  }
}

// A tokenizer that prepare wrote, in a directory where nothing else was made with it.
bool is_prepared_tokenizer(const std::string& path) {
  const std::string dir = dir_of(path);
  return first_int32(path) == kTokenizerMagic && checkpoint_files(dir).empty() &&
         !file_exists(dir + "/model.safetensors");
}

bool is_profile_table(const std::string& path) {
  const std::string head = file_head(path, 4096);
  return starts_with(head, "# command: ") && head.find("\n# date: ") != std::string::npos;
}

bool is_profile_json(const std::string& path) {
  const Json j = small_json_file(path);
  return j.kind == Json::Object && j.find("command") && j.find("date") && j.find("points");
}

bool is_bench_attention_csv(const std::string& path) {
  const std::string head = file_head(path, 4096);
  const size_t nl = head.find('\n');
  return starts_with(head, "# gpu: ") && nl != std::string::npos &&
         starts_with(head.substr(nl + 1), std::string(kBenchAttentionCsvHeader) + "\n");
}

struct OutputRule {
  const char* own;  // what this output's own earlier version is, for the message
  bool stream;      // written in place (fopen), so a character device or a pipe is fine
  bool (*is_own)(const std::string& path);
};

OutputRule output_rule(OutputKind kind) {
  switch (kind) {
    case OutputKind::TrainLog: return {"a train log", true, is_train_log};
    case OutputKind::TrainLock: return {"a train lock file", false, is_train_lock};
    case OutputKind::EvalJson: return {"an eval JSON", false, is_eval_json};
    case OutputKind::TokenizerCopy:
      return {"a copy of the same tokenizer", false, [](const std::string&) { return false; }};
    case OutputKind::PreparedTokenizer:
      return {"a tokenizer of an earlier prepare (in a directory without checkpoints or an "
              "exported model)", false, is_prepared_tokenizer};
    case OutputKind::TokenShard: return {"a token shard", false, [](const std::string& p) {
                                           return first_int32(p) == kShardMagic; }};
    case OutputKind::HfModel: return {"a model written by flashgpt export", false, is_hf_export};
    case OutputKind::HfConfig:
      return {"the config.json of a model written by flashgpt export", false,
              [](const std::string& p) { return is_hf_export(dir_of(p) + "/model.safetensors"); }};
    case OutputKind::ProfileTable: return {"a flashgpt profile table", false, is_profile_table};
    case OutputKind::ProfileJson: return {"a flashgpt profile JSON", false, is_profile_json};
    case OutputKind::BenchAttentionCsv:
      return {"a bench-attention CSV", true, is_bench_attention_csv};
  }
  THROW_ERROR("internal: unknown output kind %d", (int)kind);
}

}  // namespace

void check_output_path(const std::string& path, const char* flag, OutputKind kind) {
  const OutputRule rule = output_rule(kind);
  const std::string target = write_target(path, flag);
  struct stat st;
  if (stat(target.c_str(), &st) != 0) return;  // a new file (an unwritable place: its writer says so)
  const char* p = path.c_str();
  CHECK(!S_ISDIR(st.st_mode), "%s '%s' is a directory; give a file name", flag, p);
  if (!S_ISREG(st.st_mode)) {
    CHECK(rule.stream && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)), "%s '%s' is not a "
          "regular file (a device, pipe or socket) and flashgpt would replace it; give a file "
          "name", flag, p);
    return;
  }
  if (st.st_size == 0 || rule.is_own(target)) return;
  THROW_ERROR("%s '%s' is %s, not %s; flashgpt writes over a file only when it is its own "
              "earlier output: pick another %s, or delete that file yourself if nothing needs "
              "it", flag, p, describe_file(target).c_str(), rule.own, flag);
}
