// prepare — text files -> tokenizer.bin + train/val token shards (the format is in prepare.h).
//
// Steps: validate every option (nothing is written before that, and --out is probed for
// writability before any long work), read the inputs, split them into documents, send each
// document to train or val with a seeded RNG, train the tokenizer on the TRAIN documents only
// (so val text never shapes the vocabulary and val loss stays honest), encode the documents in
// parallel (OpenMP), then write [EOT, doc tokens...] for each document in input order, cutting
// a new shard every shard_tokens tokens (a document may straddle two shards, as in llm.c).
// Last, it prints the document lengths of the train and val shards (data/documents.h).
// Limits: everything (text and tokens) is held in memory, which suits corpora up to a few GB.
// Documents that are empty or only whitespace are dropped.
// Every output is first written under a staged name (NAME.new) and all are renamed only when
// all are complete, so a run that fails (a full disk) leaves an existing directory untouched.
// Stale shards of an earlier run in the same directory (train_NNNNNN.bin / val_NNNNNN.bin beyond
// the ones just written) are then removed, so that a glob of the directory sees only this corpus.
#include "data/prepare.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "data/documents.h"
#include "data/files.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "kernels/rng.h"
#include "model/output_files.h"

namespace {

bool is_blank(const char* s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n' || s[i] == '\v' || s[i] == '\f'))
      return false;
  return true;
}

// Splits one file's text into documents: on lines that are exactly "%" (fortune files; "%\r"
// too), or, when the file has no such line, on blank lines (paragraphs). A document keeps its
// text verbatim, newlines included; the separator lines are dropped.
void split_documents(const std::string& text, std::vector<std::string>& docs) {
  struct Line { size_t start, len; };  // len includes the '\n', if any
  std::vector<Line> lines;
  for (size_t i = 0; i < text.size();) {
    size_t j = text.find('\n', i);
    j = j == std::string::npos ? text.size() : j + 1;
    lines.push_back({i, j - i});
    i = j;
  }
  auto is_percent = [&](const Line& l) {
    std::string_view v(text.data() + l.start, l.len);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
    return v == "%";
  };
  bool fortune = false;
  for (const Line& l : lines) fortune = fortune || is_percent(l);

  size_t doc_start = 0, doc_end = 0;  // current document = text[doc_start, doc_end)
  auto flush = [&]() {
    if (doc_end > doc_start && !is_blank(text.data() + doc_start, doc_end - doc_start))
      docs.push_back(text.substr(doc_start, doc_end - doc_start));
  };
  bool open = false;
  for (const Line& l : lines) {
    bool sep = fortune ? is_percent(l) : is_blank(text.data() + l.start, l.len);
    if (sep) {
      if (open) flush();
      open = false;
    } else {
      if (!open) doc_start = l.start;
      open = true;
      doc_end = l.start + l.len;
    }
  }
  if (open) flush();
}

// The files of one prepare run, written under staged names (NAME.new) and renamed to their
// real names only once every one of them is complete: a run that fails half-way (a full disk)
// leaves an existing data directory as it was, its tokenizer.bin matching its shards.
struct Staged {
  std::vector<std::string> names;  // real names, in the order they were staged
  ~Staged() {                      // not committed: remove what was staged
    for (const std::string& n : names) std::remove((n + ".new").c_str());
  }
  std::string stage(const std::string& name) {
    names.push_back(name);
    return name + ".new";
  }
  void commit() {
    for (const std::string& n : names)
      CHECK(std::rename((n + ".new").c_str(), n.c_str()) == 0, "cannot rename '%s.new' to '%s': %s",
            n.c_str(), n.c_str(), strerror(errno));
    names.clear();
  }
};

// The DIR/PREFIX_NNNNNN.bin files there are.
std::vector<std::string> shard_paths(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> paths;
  glob_t g;
  const std::string pat =
      (std::filesystem::path(dir) / (prefix + "_[0-9][0-9][0-9][0-9][0-9][0-9].bin")).string();
  if (glob(pat.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) paths.push_back(g.gl_pathv[i]);
  globfree(&g);
  return paths;
}

// Writes tokens into DIR/PREFIX_NNNNNN.bin (staged), a new shard every `per_shard` tokens, and
// measures the documents it writes (data/documents.h).
struct ShardWriter {
  std::string dir, prefix;
  size_t per_shard;
  Staged* staged;
  std::vector<uint16_t> buf;
  int shards = 0;
  size_t total = 0;
  DocumentLengths docs;
  void add(int tok) {
    buf.push_back((uint16_t)tok);
    total++;
    if (buf.size() == per_shard) flush();
  }
  void flush() {
    if (buf.empty()) return;
    docs.add(buf.data(), buf.size());
    write_shard(staged->stage(name(shards++)), buf);
    buf.clear();
  }
  std::string name(int i) const {
    return (std::filesystem::path(dir) / flashgpt::strformat("%s_%06d.bin", prefix.c_str(), i)).string();
  }
  // Removes PREFIX_NNNNNN.bin files of an earlier run with an index >= shards.
  void remove_stale() const {
    for (const std::string& path : shard_paths(dir, prefix)) {
      const std::string base = std::filesystem::path(path).filename().string();
      if (atoi(base.c_str() + prefix.size() + 1) >= shards) std::filesystem::remove(path);
    }
  }
};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

PrepareResult prepare_validated(const PrepareOptions& opt, bool log, double t0,
                                bool& progress_open);

}  // namespace

PrepareResult prepare_corpus(const PrepareOptions& opt) {
  // ---- 1. validate everything before writing anything
  CHECK(opt.vocab_size >= 257 && opt.vocab_size <= 65536,
        "--vocab-size %d is out of range: it must be in [257, 65536] (256 bytes + <|endoftext|>; "
        "token shards store uint16 ids)", opt.vocab_size);
  CHECK(opt.val_fraction >= 0.0 && opt.val_fraction <= 0.5,
        "--val-fraction %g is out of range: it must be in [0, 0.5]", opt.val_fraction);
  CHECK(opt.shard_tokens >= 1 && opt.shard_tokens <= (size_t)INT_MAX,
        "--shard-tokens %zu is out of range: it must be in [1, %d] (int32 shard header)",
        opt.shard_tokens, INT_MAX);
  CHECK(!opt.inputs.empty(), "--input: no input files given; pass one or more text files");
  for (const std::string& in : opt.inputs) {
    struct stat sb;
    CHECK(stat(in.c_str(), &sb) == 0, "--input %s: %s", in.c_str(), strerror(errno));
    CHECK(S_ISREG(sb.st_mode), "--input %s is not a regular file", in.c_str());
    CHECK(sb.st_size > 0, "--input %s is empty", in.c_str());
    CHECK(access(in.c_str(), R_OK) == 0, "--input %s is not readable: %s", in.c_str(), strerror(errno));
  }
  CHECK(!opt.out_dir.empty(), "--out is empty; give an output directory");
  {
    std::error_code ec;
    std::filesystem::create_directories(opt.out_dir, ec);
    CHECK(!ec, "--out %s: cannot create the directory: %s", opt.out_dir.c_str(), ec.message().c_str());
    CHECK(std::filesystem::is_directory(opt.out_dir), "--out %s exists and is not a directory",
          opt.out_dir.c_str());
    // Probe with a real file: access(W_OK) is wrong on read-only mounts and for root.
    const std::string why = dir_write_error(opt.out_dir);
    CHECK(why.empty(), "--out %s is not writable: %s", opt.out_dir.c_str(), why.c_str());
  }
  // Nothing there that prepare did not make is replaced or removed (model/output_files.h).
  check_output_path((std::filesystem::path(opt.out_dir) / "tokenizer.bin").string(), "--out",
                    OutputKind::PreparedTokenizer);
  for (const char* prefix : {"train", "val"})
    for (const std::string& shard : shard_paths(opt.out_dir, prefix))
      check_output_path(shard, "--out", OutputKind::TokenShard);
  const bool log = !opt.quiet;
  const double t0 = now_s();
  // A progress line ends in '\r'; an error must not be glued to it.
  bool progress_open = false;
  try {
    return prepare_validated(opt, log, t0, progress_open);
  } catch (...) {
    if (progress_open) fputc('\n', stderr);
    throw;
  }
}

namespace {

PrepareResult prepare_validated(const PrepareOptions& opt, bool log, double t0,
                                bool& progress_open) {

  // ---- 2. read and split into documents
  std::vector<std::string> docs;
  size_t text_bytes = 0;  // of the input files
  for (const std::string& in : opt.inputs) {
    FILE* f = fopen(in.c_str(), "rb");
    CHECK(f, "--input %s: %s", in.c_str(), strerror(errno));
    std::string text;
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, got);
    bool err = ferror(f);
    fclose(f);
    CHECK(!err, "--input %s: read error: %s", in.c_str(), strerror(errno));
    CHECK(!text.empty(), "--input %s is empty", in.c_str());
    text_bytes += text.size();
    split_documents(text, docs);
  }
  CHECK(!docs.empty(), "--input: the files hold no documents (only whitespace)");
  CHECK(docs.size() >= 2 || opt.val_fraction == 0.0,
        "--input: the files hold only 1 document, too few for a train/val split; give more text "
        "or --val-fraction 0");

  // ---- 3. train/val split: a seeded RNG per document (kernels/rng.h, as in the dataloader)
  std::vector<char> is_val(docs.size(), 0);
  {
    Rng rng(opt.seed);
    size_t nval = 0;
    for (size_t d = 0; d < docs.size(); d++) {
      is_val[d] = rng.uniform() < opt.val_fraction;
      nval += is_val[d];
    }
    if (opt.val_fraction > 0 && nval == 0) is_val[docs.size() - 1] = 1;  // at least one val doc
    if (nval == docs.size()) is_val[0] = 0;                              // at least one train doc
  }

  // ---- 4. tokenizer, trained on the train documents
  std::string train_text;
  for (size_t d = 0; d < docs.size(); d++)
    if (!is_val[d]) train_text += docs[d];
  if (log) fprintf(stderr, "prepare: %zu documents, %zu bytes from %zu files\n", docs.size(),
                   text_bytes, opt.inputs.size());
  Tokenizer tok = Tokenizer::train(train_text, opt.vocab_size, [&](int done, int total) {
    if (log) fprintf(stderr, "\rprepare: training tokenizer: %d/%d merges", done, total);
    progress_open = log;
  });
  train_text = std::string();
  if (log) fprintf(stderr, " (%.1f s)\n", now_s() - t0);
  progress_open = false;
  Staged staged;
  const std::string tok_path = (std::filesystem::path(opt.out_dir) / "tokenizer.bin").string();
  tok.save(staged.stage(tok_path));

  // ---- 5. encode (documents in parallel; encode() is const and keeps no shared state)
  const double t1 = now_s();
  std::vector<std::vector<int>> enc(docs.size());
  const long long ndocs = (long long)docs.size();
  long long done = 0;
#pragma omp parallel for schedule(dynamic, 64)
  for (long long d = 0; d < ndocs; d++) {
    enc[d] = tok.encode(docs[d]);
    if (log) {
      long long k;
#pragma omp atomic capture
      k = ++done;
      if (k % 4096 == 0 || k == ndocs) {
#pragma omp critical
        {
          fprintf(stderr, "\rprepare: encoding: %lld/%lld documents", k, ndocs);
          progress_open = true;
        }
      }
    }
  }
  if (log) fprintf(stderr, " (%.1f s)\n", now_s() - t1);
  progress_open = false;

  size_t doc_bytes = 0, doc_tokens = 0;  // for the compression ratio (no separators, no EOT)
  for (size_t d = 0; d < docs.size(); d++) doc_bytes += docs[d].size(), doc_tokens += enc[d].size();

  // ---- 6. shards, in input order: [EOT, tokens...] per document
  ShardWriter train{opt.out_dir, "train", opt.shard_tokens, &staged, {}, 0, 0,
                    DocumentLengths(tok.eot_token())};
  ShardWriter val{opt.out_dir, "val", opt.shard_tokens, &staged, {}, 0, 0,
                  DocumentLengths(tok.eot_token())};
  for (size_t d = 0; d < docs.size(); d++) {
    ShardWriter& w = is_val[d] ? val : train;
    w.add(tok.eot_token());
    for (int id : enc[d]) w.add(id);
  }
  train.flush();
  val.flush();
  staged.commit();  // every file is complete: now they replace the old ones
  train.remove_stale();
  val.remove_stale();

  PrepareResult r;
  r.train_tokens = train.total;
  r.val_tokens = val.total;
  r.train_shards = train.shards;
  r.val_shards = val.shards;
  r.train_docs = train.docs.stats();
  r.val_docs = val.docs.stats();
  if (log) {
    fprintf(stderr,
            "prepare: wrote %s (vocab %d), %zu train tokens in %d shards, %zu val tokens in %d "
            "shards; %.2f bytes/token; %.1f s\n",
            tok_path.c_str(), tok.vocab_size(), r.train_tokens, r.train_shards, r.val_tokens,
            r.val_shards, (double)doc_bytes / (double)std::max<size_t>(doc_tokens, 1), now_s() - t0);
    fprintf(stderr, "prepare: train: %s\n", format_document_stats(r.train_docs).c_str());
    fprintf(stderr, "prepare: val: %s\n", format_document_stats(r.val_docs).c_str());
  }
  return r;
}

}  // namespace
