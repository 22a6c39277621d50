// Data pipeline tests: shard files, the dataloader's window semantics (contents, epochs,
// shuffling, ranks, exact resume), document lengths (data/documents.h), and prepare end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/documents.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "kernels/attention/mask.h"
#include "kernels/common.h"
#include "kernels/rng.h"

namespace {

// A fresh directory under /tmp for one test, removed with everything in it afterwards.
struct DataTempDir {
  std::string path;
  DataTempDir() {
    char tmpl[] = "/tmp/flashgpt_test_data_XXXXXX";
    char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path = p ? p : "/tmp";
  }
  ~DataTempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

template <typename F>
void expect_error_containing(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected flashgpt::Error";
  } catch (const flashgpt::Error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message: " << e.what() << "\nexpected to contain: " << n;
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), (std::streamsize)data.size());
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t base) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(base + i);
  return t;
}

std::vector<std::string> glob(const std::string& pattern) {
  std::vector<std::string> out;
  std::filesystem::path p(pattern);
  std::string prefix = p.filename().string();
  prefix = prefix.substr(0, prefix.find('*'));
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  return out;
}

struct Batch {
  std::vector<int> x, y;
  bool operator==(const Batch& o) const { return x == o.x && y == o.y; }
};
Batch next(DataLoader& dl, int B, int T) {
  Batch b{std::vector<int>((size_t)B * T, -1), std::vector<int>((size_t)B * T, -1)};
  dl.next_batch(b.x.data(), b.y.data());
  return b;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// shards

TEST(Shards, WriteReadRoundTrip) {
  DataTempDir dir;
  std::vector<uint16_t> toks = {0, 1, 65535, 42, 50256, 7};
  const std::string p = dir.file("s.bin");
  write_shard(p, toks);
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  EXPECT_EQ(std::filesystem::file_size(p), 1024u + 2 * toks.size());
  std::string raw = read_bytes(p);
  const int32_t* h = (const int32_t*)raw.data();
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 6);
  for (int i = 3; i < 256; i++) ASSERT_EQ(h[i], 0);
  EXPECT_EQ(read_shard(p), toks);
  EXPECT_EQ(read_shard(p, 65536), toks);
  EXPECT_EQ(shard_num_tokens(p), 6u);
  write_shard(dir.file("empty.bin"), {});
  EXPECT_TRUE(read_shard(dir.file("empty.bin")).empty());
}

TEST(Shards, BadFilesNameTheFile) {
  DataTempDir dir;
  const std::string good = dir.file("good.bin");
  write_shard(good, iota_tokens(100, 0));
  const std::string data = read_bytes(good);

  const std::string missing = dir.file("missing.bin");
  expect_error_containing([&] { read_shard(missing); }, {missing});
  expect_error_containing([&] { shard_num_tokens(missing); }, {missing});

  std::string m = data;
  m[0] = 'X';
  const std::string magic = dir.file("magic.bin");
  write_bytes(magic, m);
  expect_error_containing([&] { read_shard(magic); }, {magic, "magic"});

  std::string v = data;
  v[4] = 9;
  const std::string version = dir.file("version.bin");
  write_bytes(version, v);
  expect_error_containing([&] { read_shard(version); }, {version, "version"});

  const std::string trunc = dir.file("trunc.bin");
  write_bytes(trunc, data.substr(0, data.size() - 1));
  expect_error_containing([&] { read_shard(trunc); }, {trunc, "truncated"});
  expect_error_containing([&] { shard_num_tokens(trunc); }, {trunc, "truncated"});

  const std::string header_only = dir.file("header.bin");
  write_bytes(header_only, data.substr(0, 500));
  expect_error_containing([&] { read_shard(header_only); }, {header_only, "truncated"});

  const std::string longer = dir.file("long.bin");
  write_bytes(longer, data + "xx");
  expect_error_containing([&] { read_shard(longer); }, {longer});

  const std::string big = dir.file("bigid.bin");
  std::vector<uint16_t> t = iota_tokens(100, 0);
  t[37] = 5000;
  write_shard(big, t);
  expect_error_containing([&] { read_shard(big, 4096); }, {big, "5000", "4096", "vocab"});
  EXPECT_EQ(read_shard(big, 5001).size(), 100u);  // 5000 < 5001: fine
  EXPECT_EQ(read_shard(big).size(), 100u);        // vocab_size 0: no check

  expect_error_containing([&] { write_shard(dir.file("no/such/dir/x.bin"), t); }, {"no/such/dir"});
}

TEST(Shards, GlobFiles) {
  DataTempDir dir;
  for (const char* n : {"train_000002.bin", "train_000000.bin", "train_000001.bin", "val_000000.bin"})
    write_shard(dir.file(n), iota_tokens(10, 0));
  std::vector<std::string> f = glob_files(dir.file("train_*.bin"), "--train-data");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], dir.file("train_000000.bin"));
  EXPECT_EQ(f[2], dir.file("train_000002.bin"));
  EXPECT_EQ(glob_files(dir.file("val_000000.bin"), "--val-data").size(), 1u);
  const std::string pat = dir.file("nothing_*.bin");
  expect_error_containing([&] { glob_files(pat, "--train-data"); }, {"--train-data", pat});
  expect_error_containing([&] { glob_files("", "--val-data"); }, {"--val-data"});
}

// ---------------------------------------------------------------------------------------------
// dataloader

TEST(DataLoader, WindowsAreShardTokensInOrder) {
  DataTempDir dir;
  // tokens[i] = 3*i + 1 (all distinct), 2 shards of different sizes
  std::vector<uint16_t> s0(101), s1(77);
  for (size_t i = 0; i < s0.size(); i++) s0[i] = (uint16_t)(3 * i + 1);
  for (size_t i = 0; i < s1.size(); i++) s1[i] = (uint16_t)(3 * i + 2);
  write_shard(dir.file("d_0.bin"), s0);
  write_shard(dir.file("d_1.bin"), s1);
  const int B = 2, T = 8;
  DataLoader dl(dir.file("d_*.bin"), "--train-data", B, T, 1000, false, 0);
  EXPECT_EQ(dl.num_shards(), 2);
  EXPECT_EQ(dl.total_tokens(), 178u);
  // s0: (101-1)/8 = 12 windows = 6 steps; s1: 76/8 = 9 windows = 4 steps (1 left over)
  for (int epoch = 0; epoch < 2; epoch++) {
    for (const std::vector<uint16_t>* s : {&s0, &s1}) {
      int steps = (int)((s->size() - 1) / T) / B;
      for (int k = 0; k < steps; k++) {
        Batch b = next(dl, B, T);
        for (int i = 0; i < B; i++) {
          size_t w = (size_t)k * B + i;
          for (int t = 0; t < T; t++) {
            ASSERT_EQ(b.x[i * T + t], (*s)[w * T + t]) << "epoch " << epoch << " step " << k;
            ASSERT_EQ(b.y[i * T + t], (*s)[w * T + t + 1]);
          }
        }
      }
    }
    EXPECT_EQ(dl.state().epoch, epoch);  // the wrap happens lazily, at the next batch
  }
  next(dl, B, T);
  EXPECT_EQ(dl.state().epoch, 2);
  EXPECT_EQ(dl.state().shard, 0);
  dl.reset();
  Batch first = next(dl, B, T);
  EXPECT_EQ(first.x[0], s0[0]);
  EXPECT_EQ(dl.state().epoch, 0);
}

TEST(DataLoader, EpochWrapSkipsLeftoverWindows) {
  DataTempDir dir;
  write_shard(dir.file("one.bin"), iota_tokens(5 * 4 + 1, 100));  // 5 windows of T=4
  DataLoader dl(dir.file("one.bin"), "--train-data", 2, 4, 0, false, 0);
  Batch a = next(dl, 2, 4), b = next(dl, 2, 4);
  EXPECT_EQ(a.x[0], 100);
  EXPECT_EQ(b.x[0], 108);
  Batch c = next(dl, 2, 4);  // window 4 is a leftover: skipped, back to window 0
  EXPECT_EQ(c, a);
  EXPECT_EQ(dl.state().epoch, 1);
}

// Every window of every shard once per epoch, in a seeded order that differs between epochs.
TEST(DataLoader, ShuffleVisitsEveryWindowOncePerEpoch) {
  DataTempDir dir;
  const int B = 3, T = 5;
  // window first tokens identify (shard, window): shard s holds s*1000 + i
  std::vector<size_t> sizes = {6 * T + 1, 12 * T + 1, 3 * T + 1, 9 * T + 3};
  std::set<int> all;
  for (size_t s = 0; s < sizes.size(); s++) {
    write_shard(dir.file("s" + std::to_string(s) + ".bin"), iota_tokens(sizes[s], (uint16_t)(s * 1000)));
    for (size_t w = 0; w < (sizes[s] - 1) / T; w++) all.insert((int)(s * 1000 + w * T));
  }
  const int steps = (int)all.size() / B;  // every size is a multiple of B windows
  DataLoader dl(dir.file("s*.bin"), "--train-data", B, T, 0, true, 42);
  std::vector<std::vector<int>> orders;
  for (int epoch = 0; epoch < 3; epoch++) {
    std::vector<int> seen;
    for (int k = 0; k < steps; k++) {
      Batch b = next(dl, B, T);
      for (int i = 0; i < B; i++) {
        seen.push_back(b.x[i * T]);
        for (int t = 0; t < T; t++) {  // windows stay contiguous runs of the shard
          ASSERT_EQ(b.x[i * T + t], b.x[i * T] + t);
          ASSERT_EQ(b.y[i * T + t], b.x[i * T] + t + 1);
        }
      }
      EXPECT_EQ(dl.state().epoch, epoch);
    }
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()), all);
    EXPECT_EQ(seen.size(), all.size());
    orders.push_back(seen);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(DataLoader, ShuffleIsSeeded) {
  DataTempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(40 * 8 + 1, 0));
  write_shard(dir.file("b.bin"), iota_tokens(40 * 8 + 1, 1000));
  write_shard(dir.file("c.bin"), iota_tokens(40 * 8 + 1, 2000));
  const std::string pat = dir.file("*.bin");
  auto run = [&](bool shuffle, uint64_t seed) {
    DataLoader dl(pat, "--train-data", 4, 8, 0, shuffle, seed);
    std::vector<Batch> v;
    for (int i = 0; i < 70; i++) v.push_back(next(dl, 4, 8));  // > 2 epochs of 30 steps
    return v;
  };
  std::vector<Batch> a = run(true, 1), a2 = run(true, 1), b = run(true, 2), plain = run(false, 1);
  EXPECT_TRUE(a == a2);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a == plain);
  EXPECT_TRUE(plain == run(false, 99));  // the seed does not matter without shuffle
}

TEST(DataLoader, StateRestoreIsExact) {
  DataTempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(10 * 6 + 1, 0));
  write_shard(dir.file("b.bin"), iota_tokens(14 * 6 + 1, 500));
  const std::string pat = dir.file("*.bin");
  for (bool shuffle : {false, true}) {
    DataLoader ref(pat, "--train-data", 2, 6, 0, shuffle, 7);
    // stop at many positions: mid shard, at a shard's end, across the epoch wrap
    for (int stop : {0, 1, 3, 5, 6, 11, 12, 13, 30}) {
      ref.reset();
      for (int i = 0; i < stop; i++) next(ref, 2, 6);
      DataLoader::State st = ref.state();
      std::vector<Batch> want;
      for (int i = 0; i < 20; i++) want.push_back(next(ref, 2, 6));
      DataLoader fresh(pat, "--train-data", 2, 6, 0, shuffle, 7);
      fresh.restore(st);
      for (int i = 0; i < 20; i++) ASSERT_TRUE(next(fresh, 2, 6) == want[i]) << "stop " << stop << " i " << i;
      ref.restore(st);  // restoring a loader that has moved on works too
      for (int i = 0; i < 20; i++) ASSERT_TRUE(next(ref, 2, 6) == want[i]);
    }
  }
  DataLoader dl(pat, "--train-data", 2, 6, 0, true, 7);
  DataLoader::State bad;
  bad.shard = 2;
  expect_error_containing([&] { dl.restore(bad); }, {"--train-data"});
  bad.shard = 0;
  bad.window = 1000;
  expect_error_containing([&] { dl.restore(bad); }, {"--train-data"});
}

// Rank r's batch is the r-th slice of the world*B windows a single process would take.
TEST(DataLoader, RanksAreDisjointSlices) {
  DataTempDir dir;
  write_shard(dir.file("a.bin"), iota_tokens(50 * 4 + 1, 0));
  write_shard(dir.file("b.bin"), iota_tokens(31 * 4 + 3, 1000));
  const std::string pat = dir.file("*.bin");
  const int B = 2, T = 4, world = 3;
  for (bool shuffle : {false, true}) {
    DataLoader whole(pat, "--train-data", world * B, T, 0, shuffle, 5);
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; r++)
      ranks.emplace_back(new DataLoader(pat, "--train-data", B, T, 0, shuffle, 5, r, world));
    for (int step = 0; step < 40; step++) {  // 8 + 5 steps per epoch: crosses epochs
      Batch w = next(whole, world * B, T);
      std::set<int> starts;
      for (int r = 0; r < world; r++) {
        Batch b = next(*ranks[r], B, T);
        ASSERT_TRUE(std::equal(b.x.begin(), b.x.end(), w.x.begin() + r * B * T));
        ASSERT_TRUE(std::equal(b.y.begin(), b.y.end(), w.y.begin() + r * B * T));
        for (int i = 0; i < B; i++) starts.insert(b.x[i * T]);
        EXPECT_EQ(ranks[r]->state().window, whole.state().window);
      }
      EXPECT_EQ(starts.size(), (size_t)world * B);  // disjoint
    }
  }
  expect_error_containing([&] { DataLoader(pat, "--train-data", B, T, 0, false, 0, 3, 3); }, {"rank"});
}

TEST(DataLoader, BadShardsAndSizes) {
  DataTempDir dir;
  write_shard(dir.file("ok.bin"), iota_tokens(100, 0));
  write_shard(dir.file("small.bin"), iota_tokens(20, 0));
  // small.bin: (20-1)/8 = 2 windows, fewer than B=3
  expect_error_containing(
      [&] { DataLoader(dir.file("*.bin"), "--train-data", 3, 8, 0, false, 0); },
      {dir.file("small.bin"), "--batch", "--seq-len", "--train-data"});
  // ok with world 1 and B 2 ... but not with 2 ranks of B 2 (4 windows needed)
  DataLoader(dir.file("small.bin"), "--train-data", 2, 8, 0, false, 0);
  expect_error_containing(
      [&] { DataLoader(dir.file("small.bin"), "--train-data", 2, 8, 0, false, 0, 0, 2); },
      {dir.file("small.bin")});
  write_shard(dir.file("empty.bin"), {});
  expect_error_containing([&] { DataLoader(dir.file("empty.bin"), "--val-data", 1, 8, 0, false, 0); },
                          {dir.file("empty.bin")});
  expect_error_containing([&] { DataLoader(dir.file("nope*.bin"), "--val-data", 1, 8, 0, false, 0); },
                          {"--val-data", dir.file("nope*.bin")});
  expect_error_containing([&] { DataLoader(dir.file("ok.bin"), "--train-data", 0, 8, 0, false, 0); },
                          {"--batch"});
  // token ids over the vocabulary: the first shard is checked at construction
  std::vector<uint16_t> t = iota_tokens(100, 0);
  t[50] = 300;
  write_shard(dir.file("big.bin"), t);
  expect_error_containing([&] { DataLoader(dir.file("big.bin"), "--train-data", 2, 8, 257, false, 0); },
                          {dir.file("big.bin"), "300"});
  write_bytes(dir.file("junk.bin"), std::string(2000, 'j'));
  expect_error_containing([&] { DataLoader(dir.file("junk.bin"), "--train-data", 2, 8, 0, false, 0); },
                          {dir.file("junk.bin")});
}

// ---------------------------------------------------------------------------------------------
// prepare

namespace {

const char* kFortunes =
    "You will be successful in your work.\n%\n"
    "A day for firm decisions!  Or is it?\n%\n"
    "Q:  How many programmers does it take to change a light bulb?\n"
    "A:  None.  That's a hardware problem.\n%\n"
    "   \n%\n"  // whitespace only: dropped
    "The computer is mightier than the pen, the sword, and usually, the programmer.\n%\n"
    "Don't worry.  Be happy.\r\n%\r\n"
    "Naïve café: 42 crème brûlées, 7 ümlauts — and a \x01 control byte.\n%\n"
    "It is easier to write an incorrect program than understand a correct one.\n%\n"
    "Real programmers don't comment their code.  It was hard to write; it should be hard to "
    "understand.\n%\n"
    "There are two ways to write error-free programs; only the third one works.\n";
const char* kParagraphs =
    "The first paragraph of the second file\nspans two lines.\n\n"
    "The second paragraph follows a blank line.\n  \t\n\n"
    "The third paragraph, after blank lines with spaces, ends the file without a newline.";

std::vector<std::string> expected_docs() {
  return {"You will be successful in your work.\n",
          "A day for firm decisions!  Or is it?\n",
          "Q:  How many programmers does it take to change a light bulb?\n"
          "A:  None.  That's a hardware problem.\n",
          "The computer is mightier than the pen, the sword, and usually, the programmer.\n",
          "Don't worry.  Be happy.\r\n",
          "Naïve café: 42 crème brûlées, 7 ümlauts — and a \x01 control byte.\n",
          "It is easier to write an incorrect program than understand a correct one.\n",
          "Real programmers don't comment their code.  It was hard to write; it should be hard "
          "to understand.\n",
          "There are two ways to write error-free programs; only the third one works.\n",
          "The first paragraph of the second file\nspans two lines.\n",
          "The second paragraph follows a blank line.\n",
          "The third paragraph, after blank lines with spaces, ends the file without a newline."};
}

// All tokens of the shards matching pattern, in order (files sorted by name).
std::vector<int> read_all(const std::string& pattern, int vocab, int* nfiles) {
  std::vector<int> all;
  std::vector<std::string> files = glob_files(pattern, "test");
  *nfiles = (int)files.size();
  for (const std::string& f : files) {
    std::vector<uint16_t> t = read_shard(f, vocab);
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

// Splits a token stream into documents at EOT; the stream must start with EOT.
std::vector<std::string> decode_docs(const Tokenizer& tok, const std::vector<int>& ids) {
  std::vector<std::string> docs;
  std::vector<int> cur;
  EXPECT_TRUE(ids.empty() || ids[0] == tok.eot_token());
  for (size_t i = 0; i < ids.size(); i++) {
    if (ids[i] == tok.eot_token()) {
      if (i > 0) docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(ids[i]);
    }
  }
  if (!ids.empty()) docs.push_back(tok.decode(cur));
  return docs;
}

}  // namespace

TEST(Prepare, EndToEnd) {
  DataTempDir dir;
  write_bytes(dir.file("fortunes"), kFortunes);
  write_bytes(dir.file("paragraphs.txt"), kParagraphs);
  PrepareOptions opt;
  opt.inputs = {dir.file("fortunes"), dir.file("paragraphs.txt")};
  opt.out_dir = dir.file("out/nested");  // created, parents included
  opt.vocab_size = 300;
  opt.val_fraction = 0.3;
  opt.shard_tokens = 100;
  opt.quiet = true;
  PrepareResult r = prepare_corpus(opt);

  Tokenizer tok = Tokenizer::load(opt.out_dir + "/tokenizer.bin");
  ASSERT_EQ(tok.vocab_size(), 300);
  int ntrain = 0, nval = 0;
  std::vector<int> train = read_all(opt.out_dir + "/train_*.bin", 300, &ntrain);
  std::vector<int> val = read_all(opt.out_dir + "/val_*.bin", 300, &nval);
  EXPECT_EQ(train.size(), r.train_tokens);
  EXPECT_EQ(val.size(), r.val_tokens);
  EXPECT_EQ(ntrain, r.train_shards);
  EXPECT_EQ(nval, r.val_shards);
  EXPECT_EQ(r.train_shards, (int)((r.train_tokens + 99) / 100));  // full shards, then the rest
  EXPECT_EQ(shard_num_tokens(opt.out_dir + "/train_000000.bin"), 100u);
  EXPECT_GE(r.val_shards, 1);

  std::vector<std::string> tdocs = decode_docs(tok, train), vdocs = decode_docs(tok, val);
  EXPECT_GE(vdocs.size(), 1u);
  EXPECT_GE(tdocs.size(), vdocs.size());
  // The document lengths it reports are those of the shards it wrote, one per EOT.
  for (const char* split : {"train", "val"}) {
    SCOPED_TRACE(split);
    const bool is_train = std::string(split) == "train";
    const DocumentStats& got = is_train ? r.train_docs : r.val_docs;
    const DocumentStats want =
        shard_document_lengths(glob_files(opt.out_dir + "/" + split + "_*.bin", "test"),
                               tok.eot_token())
            .stats();
    EXPECT_EQ(format_document_stats(got), format_document_stats(want));
    EXPECT_EQ(got.count, (is_train ? tdocs : vdocs).size());
    EXPECT_EQ(got.tokens, is_train ? r.train_tokens : r.val_tokens);
  }
  // Each split keeps the input order; together they are exactly the documents.
  std::vector<std::string> want = expected_docs(), got = tdocs;
  got.insert(got.end(), vdocs.begin(), vdocs.end());
  EXPECT_EQ(std::count(train.begin(), train.end(), tok.eot_token()) +
                std::count(val.begin(), val.end(), tok.eot_token()),
            (long)want.size());
  EXPECT_TRUE(std::is_sorted(tdocs.begin(), tdocs.end(), [&](const std::string& a, const std::string& b) {
    return std::find(want.begin(), want.end(), a) < std::find(want.begin(), want.end(), b);
  }));
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);

  // Same options again: identical bytes (deterministic). Then bigger shards into the same
  // directory: the stale extra shards of the first run are gone.
  std::string tok_bytes = read_bytes(opt.out_dir + "/tokenizer.bin");
  std::string shard0 = read_bytes(opt.out_dir + "/train_000000.bin");
  prepare_corpus(opt);
  EXPECT_EQ(read_bytes(opt.out_dir + "/tokenizer.bin"), tok_bytes);
  EXPECT_EQ(read_bytes(opt.out_dir + "/train_000000.bin"), shard0);
  opt.shard_tokens = 100000;
  PrepareResult r2 = prepare_corpus(opt);
  EXPECT_EQ(r2.train_shards, 1);
  EXPECT_EQ(r2.train_tokens, r.train_tokens);
  int n2 = 0;
  EXPECT_EQ(read_all(opt.out_dir + "/train_*.bin", 300, &n2).size(), r.train_tokens);
  EXPECT_EQ(n2, 1);
  for (const auto& e : std::filesystem::directory_iterator(opt.out_dir))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();

  // No validation split: every document in train, no val shard.
  opt.val_fraction = 0;
  opt.out_dir = dir.file("noval");
  PrepareResult r3 = prepare_corpus(opt);
  EXPECT_EQ(r3.val_tokens, 0u);
  EXPECT_EQ(r3.val_shards, 0);
  EXPECT_TRUE(glob(opt.out_dir + "/val_*.bin").empty());
  Tokenizer tok3 = Tokenizer::load(opt.out_dir + "/tokenizer.bin");
  std::vector<int> all = read_all(opt.out_dir + "/train_*.bin", 300, &ntrain);
  EXPECT_EQ(all.size(), r3.train_tokens);
  EXPECT_EQ(decode_docs(tok3, all), expected_docs());  // in input order
}

TEST(Prepare, BadOptionsWriteNothing) {
  DataTempDir dir;
  write_bytes(dir.file("in.txt"), kFortunes);
  write_bytes(dir.file("empty.txt"), "");
  PrepareOptions good;
  good.inputs = {dir.file("in.txt")};
  good.out_dir = dir.file("out");
  good.vocab_size = 280;
  good.quiet = true;
  struct Case {
    std::function<void(PrepareOptions&)> edit;
    std::vector<std::string> needles;
  };
  std::vector<Case> cases = {
      {[](PrepareOptions& o) { o.vocab_size = 256; }, {"--vocab-size", "256"}},
      {[](PrepareOptions& o) { o.vocab_size = 65537; }, {"--vocab-size", "65537"}},
      {[](PrepareOptions& o) { o.val_fraction = 0.6; }, {"--val-fraction"}},
      {[](PrepareOptions& o) { o.val_fraction = -0.1; }, {"--val-fraction"}},
      {[](PrepareOptions& o) { o.shard_tokens = 0; }, {"--shard-tokens"}},
      {[](PrepareOptions& o) { o.inputs.clear(); }, {"--input"}},
      {[&](PrepareOptions& o) { o.inputs.push_back(dir.file("missing.txt")); },
       {"--input", dir.file("missing.txt")}},
      {[&](PrepareOptions& o) { o.inputs.push_back(dir.file("empty.txt")); },
       {"--input", dir.file("empty.txt"), "empty"}},
      {[&](PrepareOptions& o) { o.inputs = {dir.path}; }, {"--input", dir.path}},
      {[](PrepareOptions& o) { o.out_dir = ""; }, {"--out"}},
  };
  for (Case& c : cases) {
    PrepareOptions o = good;
    c.edit(o);
    expect_error_containing([&] { prepare_corpus(o); }, c.needles);
    EXPECT_FALSE(std::filesystem::exists(good.out_dir)) << c.needles[0];
  }
  // --out under a regular file cannot be created; --out that is a file is not a directory
  PrepareOptions o = good;
  o.out_dir = dir.file("in.txt") + "/sub";
  expect_error_containing([&] { prepare_corpus(o); }, {"--out", o.out_dir});
  o.out_dir = dir.file("in.txt");
  expect_error_containing([&] { prepare_corpus(o); }, {"--out", o.out_dir});
  EXPECT_EQ(read_bytes(dir.file("in.txt")), kFortunes);
  // too small a corpus for the vocabulary: says which flag to lower
  o = good;
  o.vocab_size = 60000;
  expect_error_containing([&] { prepare_corpus(o); }, {"--vocab-size"});
  // one document cannot be split into train and val
  write_bytes(dir.file("one.txt"), "just one document\n");
  o = good;
  o.inputs = {dir.file("one.txt")};
  o.vocab_size = 257;
  expect_error_containing([&] { prepare_corpus(o); }, {"--val-fraction"});
  o.val_fraction = 0;
  EXPECT_EQ(prepare_corpus(o).train_tokens, 1u + 18u);  // EOT + 18 bytes
}

// ---------------------------------------------------------------------------------------------
// document lengths (data/documents.h)

namespace {
constexpr uint16_t kE = 9;  // the EOT of these streams
}  // namespace

TEST(Documents, LengthsFollowTheEotRule) {
  struct {
    std::vector<uint16_t> stream;
    std::vector<uint64_t> lengths;
  } cases[] = {
      {{kE, 1, 2, kE, 3, kE, kE, 4, 5, 6}, {3, 2, 1, 4}},  // the EOT counts in its document
      {{1, 2, kE, 3}, {2, 2}},                          // starts mid-document
      {{kE}, {1}},
      {{1, 2, 3}, {3}},                                 // no EOT: one document
      {{}, {}},
  };
  for (const auto& c : cases) {
    DocumentLengths d(kE);
    d.add(c.stream.data(), c.stream.size());
    EXPECT_EQ(d.lengths(), c.lengths);
  }
  // Nearest-rank percentiles of {3, 2, 1, 4}: p50 = 2, p90 = 4.
  DocumentLengths d(kE);
  d.add(cases[0].stream.data(), cases[0].stream.size());
  const DocumentStats s = d.stats();
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.tokens, 10u);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_EQ(s.p50, 2u);
  EXPECT_EQ(s.p90, 4u);
  EXPECT_EQ(s.max, 4u);
  EXPECT_EQ(format_document_stats(s),
            "4 documents in 10 tokens; tokens per document: mean 2.5, p50 2, p90 4, max 4");
  EXPECT_EQ(format_document_stats(DocumentLengths(kE).stats()), "no documents");
}

// A random stream fed in random pieces, and written as shards, is the same stream: documents
// that straddle pieces and shards are counted once. Stats against sorting by hand.
TEST(Documents, PiecesAndShardsAreOneStream) {
  Rng rng(11);
  std::vector<uint16_t> stream(5000);
  for (uint16_t& t : stream) t = rng.uniform() < 0.02 ? kE : uint16_t(rng.next_u64() % kE);
  DocumentLengths whole(kE), pieces(kE);
  whole.add(stream.data(), stream.size());
  for (size_t i = 0; i < stream.size();) {
    const size_t n = std::min<size_t>(1 + rng.next_u64() % 300, stream.size() - i);
    pieces.add(stream.data() + i, n);
    i += n;
  }
  EXPECT_EQ(pieces.lengths(), whole.lengths());

  std::vector<uint64_t> len;  // by hand
  for (size_t i = 0; i < stream.size(); i++)
    if (i == 0 || stream[i] == kE) len.push_back(1);
    else len.back()++;
  EXPECT_EQ(whole.lengths(), len);
  std::sort(len.begin(), len.end());
  const DocumentStats s = whole.stats();
  EXPECT_EQ(s.count, len.size());
  EXPECT_EQ(s.tokens, stream.size());
  EXPECT_EQ(s.p50, len[(len.size() + 1) / 2 - 1]);
  EXPECT_EQ(s.p90, len[(len.size() * 9 + 9) / 10 - 1]);
  EXPECT_EQ(s.max, len.back());

  DataTempDir dir;
  std::vector<std::string> files;
  for (size_t i = 0, k = 0; i < stream.size(); i += 1234, k++) {
    files.push_back(dir.file(flashgpt::strformat("train_%06zu.bin", k)));
    const size_t end = std::min<size_t>(i + 1234, stream.size());
    write_shard(files.back(), std::vector<uint16_t>(stream.begin() + i, stream.begin() + end));
  }
  EXPECT_EQ(shard_document_lengths(files, kE).lengths(), whole.lengths());
  // A cap reads the first max_tokens tokens only, across shards.
  DocumentLengths first(kE);
  first.add(stream.data(), 3000);
  EXPECT_EQ(shard_document_lengths(files, kE, 3000).lengths(), first.lengths());
  expect_error_containing([&] { shard_document_lengths({dir.file("missing.bin")}, kE); },
                          {"missing.bin"});
}

// The work fraction against the mask itself: each window's document starts (mask.h) and its
// visible pairs, over the causal pairs.
TEST(Documents, WorkFractionMatchesTheMask) {
  Rng rng(12);
  std::vector<uint16_t> stream(3000);
  for (uint16_t& t : stream) t = rng.uniform() < 0.01 ? kE : uint16_t(rng.next_u64() % kE);
  DocumentLengths docs(kE);
  docs.add(stream.data(), stream.size());
  for (int T : {1, 7, 64, 300, 3000, 4000})
    for (int W : {0, 1, 5, 100}) {
      const size_t windows = stream.size() / T;
      double visible = 0;
      for (size_t w = 0; w < windows; w++) {
        const std::vector<int> tok(stream.begin() + w * T, stream.begin() + (w + 1) * T);
        const std::vector<int> ds = document_starts(tok.data(), 1, T, kE);
        visible += double(visible_pairs(AttnMask{ds.data(), W}, 1, T));
      }
      const double want = windows ? visible / (windows * (double(T) * (T + 1) / 2)) : 1.0;
      EXPECT_NEAR(document_mask_work_fraction(docs.lengths(), T, W), want, 1e-12 * want)
          << "T=" << T << " W=" << W;
    }
  // One document: no saving without a window.
  const std::vector<uint64_t> one = {100000};
  EXPECT_DOUBLE_EQ(document_mask_work_fraction(one, 1024, 0), 1.0);
}
