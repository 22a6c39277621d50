// profile_report.cpp — the reporting half of `flashgpt profile` (bench/profile_report.h): the
// CSV and JSON files, the plot subprocess and the terminal tables. What is predicted and
// measured: bench/profile.cpp.
#include "bench/profile_report.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>

#include "data/files.h"
#include "kernels/common.h"
#include "model/config.h"
#include "model/layout.h"

namespace {

using flashgpt::strformat;

constexpr double kGiB = double(1ull << 30);
double gib(double bytes) { return bytes / kGiB; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + v[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Files

// Written to a temporary name and renamed (data/files.h): an interrupted run never leaves half
// a file.
void write_file(const std::string& path, const std::string& text) {
  write_file_atomically(path, [&](FILE* f) {
    return std::fwrite(text.data(), 1, text.size(), f) == text.size();
  });
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return q + "\"";
}

std::string json_string(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') q += '\\', q += char(c);
    else if (c == '\n') q += "\\n";
    else if (c < 0x20) q += strformat("\\u%04x", c);
    else q += char(c);
  }
  return q + "\"";
}

// Numbers for CSV/JSON: empty (CSV) / null (JSON) when not available.
std::string num(double x, bool have, const char* fmt = "%.6g") {
  return have && std::isfinite(x) ? strformat(fmt, x) : "";
}
std::string jnum(const std::string& s) { return s.empty() ? "null" : s; }

// The CSV breakdown columns, by plan line name; any other line goes to mem_other.
const char* const kMemColumns[] = {"parameters",      "gradients",         "optimizer",
                                   "activations",     "attention saved",   "attention scratch",
                                   "logits",          "backward scratch"};

std::map<std::string, double> breakdown(const std::vector<MemoryLine>& lines) {
  std::map<std::string, double> m;
  for (const char* c : kMemColumns) m[c] = 0;
  m["other"] = 0;
  for (const MemoryLine& l : lines) {
    bool known = false;
    for (const char* c : kMemColumns) known = known || l.what == c;
    m[known ? l.what : "other"] += (double)l.bytes;
  }
  return m;
}

std::string column_name(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return "mem_" + s;
}

// One row's fields, in column order (shared by the CSV and the JSON).
std::vector<std::pair<std::string, std::string>> point_fields(const ProfilePoint& p) {
  std::vector<std::pair<std::string, std::string>> f;
  const bool roof = p.roof_attn_ms > 0;
  f.push_back({"backend", p.backend});
  f.push_back({"seq_len", std::to_string(p.T)});
  f.push_back({"batch", std::to_string(p.B)});
  f.push_back({"tokens", std::to_string((long long)p.B * p.T)});
  f.push_back({"status", p.status});
  f.push_back({"fits", p.fits ? "1" : "0"});
  f.push_back({"pred_bytes", std::to_string(p.pred_bytes)});
  f.push_back({"peak_bytes", p.ran ? std::to_string(p.peak_bytes) : ""});
  f.push_back({"mem_ratio", num(p.mem_ratio, p.ran, "%.4f")});
  f.push_back({"free_bytes", p.free_bytes ? std::to_string(p.free_bytes) : ""});
  const auto bd = breakdown(p.ran && !p.lines.empty() ? p.lines : p.pred_lines);
  for (const char* c : kMemColumns) f.push_back({column_name(c), strformat("%.0f", bd.at(c))});
  f.push_back({"mem_other", strformat("%.0f", bd.at("other"))});
  f.push_back({"ms_per_step", num(p.ms_step, p.ran, "%.3f")});
  f.push_back({"tokens_per_s", num(p.tokens_per_s, p.ran, "%.0f")});
  f.push_back({"attn_ms", num(p.attn_ms, p.ran && p.attn_ms >= 0, "%.3f")});
  f.push_back({"attn_share", num(p.attn_share, p.ran && p.attn_ms >= 0, "%.4f")});
  f.push_back({"loss", num(p.loss, p.ran, "%.4f")});
  f.push_back({"attn_fwd_flops", strformat("%.0f", p.cost.fwd.flops)});
  f.push_back({"attn_bwd_flops", strformat("%.0f", p.cost.bwd.flops)});
  f.push_back({"attn_fwd_mma_flops", strformat("%.0f", p.cost.fwd.mma_flops)});
  f.push_back({"attn_bwd_mma_flops", strformat("%.0f", p.cost.bwd.mma_flops)});
  f.push_back({"attn_fwd_bytes", strformat("%.0f", p.cost.fwd.bytes)});
  f.push_back({"attn_bwd_bytes", strformat("%.0f", p.cost.bwd.bytes)});
  f.push_back({"attn_flops_step", strformat("%.0f", p.attn_flops_step)});
  f.push_back({"attn_bytes_step", strformat("%.0f", p.attn_bytes_step)});
  f.push_back({"roofline_fwd_ms", num(p.roof_fwd_ms, roof, "%.4f")});
  f.push_back({"roofline_bwd_ms", num(p.roof_bwd_ms, roof, "%.4f")});
  f.push_back({"roofline_attn_ms", num(p.roof_attn_ms, roof, "%.4f")});
  f.push_back({"pred_speedup_vs_naive", num(p.pred_speedup, p.pred_speedup > 0, "%.3f")});
  f.push_back({"meas_speedup_vs_naive", num(p.meas_speedup, p.meas_speedup > 0, "%.3f")});
  f.push_back({"attn_gemm_fraction", num(p.gemm_fraction, p.gemm_fraction > 0, "%.4f")});
  return f;
}

std::vector<std::pair<std::string, std::string>> meta_fields(const ProfileOptions& opt,
                                                             const ProfileReport& r,
                                                             const ProfileMeta& m) {
  std::vector<std::pair<std::string, std::string>> f;
  f.push_back({"command", m.command});
  f.push_back({"date", m.date});
  f.push_back({"gpu", m.gpu.empty() ? "none" : m.gpu});
  f.push_back({"model", m.model_desc});
  f.push_back({"plan_only", opt.plan_only ? "1" : "0"});
  f.push_back({"capacity_bytes", std::to_string(r.capacity_bytes)});
  const bool c = r.have_ceilings;
  f.push_back({"copy_bytes_per_s", num(r.ceilings.copy_bytes_per_s, c, "%.0f")});
  f.push_back({"bf16_flops", num(r.ceilings.bf16_flops, c, "%.0f")});
  f.push_back({"gpu_total_bytes", c ? std::to_string(r.ceilings.total_bytes) : ""});
  f.push_back({"gpu_sms", c ? std::to_string(r.ceilings.sms) : ""});
  f.push_back({"gemm_n", c ? std::to_string(r.ceilings.gemm_n) : ""});
  f.push_back({"copy_bytes", c ? std::to_string(r.ceilings.copy_bytes) : ""});
  return f;
}

std::string fmt_or_dash(double x, bool have, const char* fmt) {
  return have ? strformat(fmt, x) : std::string("-");
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void make_profile_dir(const std::string& dir) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (!cur.empty()) mkdir(cur.c_str(), 0755);
  }
  struct stat st;
  CHECK(stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
        "profile: --out '%s' cannot be created (%s); pick another --out", dir.c_str(),
        strerror(errno));
  const std::string why = dir_write_error(dir);
  CHECK(why.empty(), "profile: --out '%s' is not writable (%s); pick another --out", dir.c_str(),
        why.c_str());
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_profile_outputs(const ProfileOptions& opt, const ProfileReport& r, const ProfileMeta& m) {
  std::string csv;
  for (const auto& kv : meta_fields(opt, r, m)) csv += "# " + kv.first + ": " + kv.second + "\n";
  bool header = false;
  for (const ProfilePoint& p : r.points) {
    const auto f = point_fields(p);
    if (!header) {
      for (size_t i = 0; i < f.size(); i++) csv += (i ? "," : "") + f[i].first;
      csv += "\n";
      header = true;
    }
    for (size_t i = 0; i < f.size(); i++) csv += (i ? "," : "") + csv_field(f[i].second);
    csv += "\n";
  }
  write_file(r.csv_path, csv);

  // Numeric fields go out as numbers, the rest as strings.
  auto is_text = [](const std::string& k) { return k == "backend" || k == "status"; };
  std::string js = "{\n";
  for (const auto& kv : meta_fields(opt, r, m)) {
    const bool text = kv.first == "command" || kv.first == "date" || kv.first == "gpu" ||
                      kv.first == "model";
    js += "  " + json_string(kv.first) + ": " + (text ? json_string(kv.second) : jnum(kv.second)) + ",\n";
  }
  js += "  \"options\": {\"model\": " + json_string(opt.model) + ", \"attn\": " +
        json_string(join(opt.attn, ",")) + ", \"tokens\": " + std::to_string(opt.tokens) +
        ", \"batch\": " + std::to_string(opt.batch) + ", \"warmup\": " + std::to_string(opt.warmup) +
        ", \"steps\": " + std::to_string(opt.steps) + ", \"recompute\": " + json_string(recompute_name(opt.recompute)) +
        ", \"pos\": " + json_string(pos_name(opt.pos)) + ", \"vocab\": " + std::to_string(opt.vocab) +
        ", \"max_step_seconds\": " + strformat("%g", opt.max_step_seconds) +
        ", \"seed\": " + std::to_string(opt.seed) + "},\n";
  js += "  \"points\": [";
  for (size_t i = 0; i < r.points.size(); i++) {
    const ProfilePoint& p = r.points[i];
    js += i ? ",\n    {" : "\n    {";
    for (const auto& kv : point_fields(p)) {
      js += json_string(kv.first) + ": " +
            (is_text(kv.first) ? json_string(kv.second) : jnum(kv.second)) + ", ";
    }
    auto lines = [](const std::vector<MemoryLine>& v) {
      std::string s = "{";
      for (size_t k = 0; k < v.size(); k++)
        s += (k ? ", " : "") + json_string(v[k].what) + ": " + std::to_string(v[k].bytes);
      return s + "}";
    };
    js += "\"breakdown_predicted\": " + lines(p.pred_lines) +
          ", \"breakdown_measured\": " + (p.ran ? lines(p.lines) : std::string("null")) + "}";
  }
  js += "\n  ]\n}\n";
  write_file(r.json_path, js);
}

// ---------------------------------------------------------------------------------------------
// Plots: scripts/plot_profile.py beside the working directory or the executable.

std::string plot_python() {
  static const std::string found = [] {  // asked once per process: importing takes a second
    for (const char* py : {"python3", "/usr/bin/python3"})
      if (std::system((std::string(py) + " -c 'import matplotlib' > /dev/null 2>&1").c_str()) == 0)
        return std::string(py);
    return std::string();
  }();
  return found;
}

void run_plot_script(const std::string& csv, const std::string& out_dir, std::FILE* out) {
  std::vector<std::string> candidates = {"scripts/plot_profile.py"};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string dir = exe;
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/../scripts/plot_profile.py");
    candidates.push_back(dir + "/scripts/plot_profile.py");
  }
  std::string script;
  for (const std::string& c : candidates)
    if (access(c.c_str(), R_OK) == 0) {
      script = c;
      break;
    }
  if (script.empty()) {
    std::fprintf(out, "plots: scripts/plot_profile.py not found; run it from the repository "
                      "root: python3 scripts/plot_profile.py %s\n", csv.c_str());
    return;
  }
  for (const std::string& s : {script, csv, out_dir})
    if (s.find('\'') != std::string::npos) {
      std::fprintf(out, "plots: skipped (a path contains a quote); run python3 %s %s\n",
                   script.c_str(), csv.c_str());
      return;
    }
  std::fflush(out);
  const std::string py = plot_python();  // none: the script says that matplotlib is missing
  const std::string cmd =
      (py.empty() ? "python3" : py) + " '" + script + "' '" + csv + "' --out '" + out_dir + "'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    std::fprintf(out, "plots: not made (`%s` failed with exit status %d)\n", cmd.c_str(),
                 WIFEXITED(rc) ? WEXITSTATUS(rc) : rc);
}

std::string model_description(const ProfileOptions& opt) {
  GPTConfig c = gpt_preset(opt.model, opt.vocab, opt.seq_lens.front());
  c.rope = opt.pos == PosEncoding::rope;
  const std::string docs = opt.mask.kind != MaskKind::kDocument ? ""
                           : !opt.data_dir.empty() ? ", documents of " + opt.data_dir
                                                   : strformat(", random documents of mean %d", opt.doc_len);
  return strformat("%s (L=%d C=%d NH=%d HS=%d, %.1fM parameters at T=%d, %s positions, "
                   "recompute %s, %s mask%s)",
                   opt.model.c_str(), c.num_layers, c.channels, c.num_heads, c.head_size(),
                   ParamLayout(c).total / 1e6, opt.seq_lens.front(),
                   c.rope ? "rotary" : "learned", recompute_name(opt.recompute),
                   describe_mask(opt.mask).c_str(), docs.c_str());
}

// ---------------------------------------------------------------------------------------------
// --plan-only

void print_plan(const ProfileOptions& opt, const ProfileReport& r, const std::string& cap_src,
                std::FILE* out) {
  std::fprintf(out, "flashgpt profile --plan-only: %s, %s; capacity %.1f GiB (%s); no GPU used\n",
               model_description(opt).c_str(),
               opt.batch > 0 ? strformat("batch %d", opt.batch).c_str()
                             : strformat("%d tokens per step", opt.tokens).c_str(),
               gib((double)r.capacity_bytes), cap_src.c_str());
  std::fprintf(out, "GiB by line of the memory plan (model/memory_plan.h); attention per training "
                    "step, all layers: TFLOP (4*B*NH*T^2*HS/2 forward, 2.5x backward, times the mask's "
                    "share of the visible pairs) and GB of "
                    "minimum HBM traffic\n");
  std::fprintf(out, "%-7s %7s %4s %11s %11s %10s %12s %8s %7s %9s %10s %9s  %s\n", "backend", "T",
               "B", "params+opt", "activations", "attn saved", "attn scratch", "logits", "other",
               "total GiB", "attn TFLOP", "attn GB", "fits");
  for (const ProfilePoint& p : r.points) {
    if (p.status.rfind("error:", 0) == 0) {  // no plan: the reason follows below
      std::fprintf(out, "%-7s %7d %4d %11s  no\n", p.backend.c_str(), p.T, p.B, "-");
      continue;
    }
    const auto bd = breakdown(p.pred_lines);
    const double popt = bd.at("parameters") + bd.at("gradients") + bd.at("optimizer");
    const double other = bd.at("backward scratch") + bd.at("other");
    std::fprintf(out, "%-7s %7d %4d %11.2f %11.2f %10.2f %12.2f %8.2f %7.2f %9.2f %10.2f %9.1f  %s\n",
                 p.backend.c_str(), p.T, p.B, gib(popt), gib(bd.at("activations")),
                 gib(bd.at("attention saved")), gib(bd.at("attention scratch")),
                 gib(bd.at("logits")), gib(other), gib((double)p.pred_bytes),
                 p.attn_flops_step / 1e12, p.attn_bytes_step / 1e9,
                 p.fits ? "yes" : "no");
  }
  std::fprintf(out, "\n");
  const int L = gpt_preset(opt.model, opt.vocab, 1).num_layers;
  const int kept = recompute_depths(opt.recompute, L).attn;
  for (const std::string& be : opt.attn) {
    int largest_fit = 0, n = 0, nfit = 0;
    for (const ProfilePoint& p : r.points)
      if (p.backend == be) {
        n++;
        if (p.fits) nfit++, largest_fit = std::max(largest_fit, p.T);
      }
    if (nfit == n)
      std::fprintf(out, "%s: every T fits in %.1f GiB\n", be.c_str(), gib((double)r.capacity_bytes));
    else if (nfit == 0)
      std::fprintf(out, "%s: no T fits in %.1f GiB\n", be.c_str(), gib((double)r.capacity_bytes));
    else
      std::fprintf(out, "%s: fits up to T=%d in %.1f GiB\n", be.c_str(), largest_fit,
                   gib((double)r.capacity_bytes));
    for (const ProfilePoint& p : r.points)
      if (p.backend == be && !p.fits && p.status.rfind("OOM", 0) != 0)
        std::fprintf(out, "  %s at T=%d: %s\n", be.c_str(), p.T, p.status.c_str());
      else if (p.backend == be && !p.fits)
        std::fprintf(out,
                     "  %s at T=%d needs %.1f GiB for attention alone (saved state of %d layer%s "
                     "%.1f GiB + scratch %.1f GiB); %.1f GiB in all, %.1f GiB capacity\n",
                     be.c_str(), p.T, gib((double)(p.attn_saved_bytes + p.attn_scratch_bytes)),
                     kept, kept == 1 ? "" : "s", gib((double)p.attn_saved_bytes),
                     gib((double)p.attn_scratch_bytes), gib((double)p.pred_bytes),
                     gib((double)r.capacity_bytes));
  }
  int nfit = 0;
  for (const ProfilePoint& p : r.points) nfit += p.fits;
  std::fprintf(out, "summary: %zu points planned, %d fit in %.1f GiB, %zu do not; wrote %s, %s\n",
               r.points.size(), nfit, gib((double)r.capacity_bytes), r.points.size() - nfit,
               r.csv_path.c_str(), r.json_path.c_str());
}

// ---------------------------------------------------------------------------------------------
// The GPU sweep's table

void print_sweep_header(std::FILE* out) {
  std::fprintf(out, "%-7s %7s %4s %8s %8s %6s %9s %9s %8s %6s %8s %6s  %s\n", "backend", "T",
               "B", "pred GiB", "meas GiB", "ratio", "ms/step", "tok/s", "attn ms", "attn%",
               "roof ms", "gemm%", "status");
}

void print_sweep_row(const ProfilePoint& p, std::FILE* out) {
  const bool a = p.ran && p.attn_ms >= 0;
  std::fprintf(out, "%-7s %7d %4d %8.2f %8s %6s %9s %9s %8s %6s %8s %6s  %s\n", p.backend.c_str(), p.T,
               p.B, gib((double)p.pred_bytes),
               fmt_or_dash(gib((double)p.peak_bytes), p.ran, "%.2f").c_str(),
               fmt_or_dash(p.mem_ratio, p.ran, "%.3f").c_str(),
               fmt_or_dash(p.ms_step, p.ran, "%.1f").c_str(),
               fmt_or_dash(p.tokens_per_s, p.ran, "%.0f").c_str(),
               fmt_or_dash(p.attn_ms, a, "%.1f").c_str(),
               fmt_or_dash(p.attn_share * 100, a, "%.1f%%").c_str(),
               fmt_or_dash(p.roof_attn_ms, p.roof_attn_ms > 0, "%.1f").c_str(),
               fmt_or_dash(p.gemm_fraction * 100, p.gemm_fraction > 0, "%.0f%%").c_str(),
               p.status.c_str());
  std::fflush(out);
}

void print_sweep_summary(const ProfileOptions& opt, const ProfileReport& r, std::FILE* out) {
  for (const std::string& be : opt.attn) {
    if (be == "naive") continue;
    bool any = false;
    for (const ProfilePoint& p : r.points) any = any || (p.backend == be && p.pred_speedup > 0);
    if (!any) continue;
    std::fprintf(out, "\n%s over naive, attention time per step (naive / %s):\n", be.c_str(),
                 be.c_str());
    std::fprintf(out, "%7s %10s %10s\n", "T", "predicted", "measured");
    for (const ProfilePoint& p : r.points)
      if (p.backend == be)
        std::fprintf(out, "%7d %10s %10s\n", p.T,
                     fmt_or_dash(p.pred_speedup, p.pred_speedup > 0, "%.2fx").c_str(),
                     fmt_or_dash(p.meas_speedup, p.meas_speedup > 0, "%.2fx").c_str());
  }
  int ran = 0, within = 0, oom = 0, skipped = 0, errors = 0;
  for (const ProfilePoint& p : r.points) {
    if (p.ran) {
      ran++;
      within += std::fabs(p.mem_ratio - 1) <= 0.05;
    } else if (p.status.rfind("OOM", 0) == 0) {
      oom++;
    } else if (p.status.rfind("skipped", 0) == 0) {
      skipped++;
    } else {
      errors++;
    }
  }
  std::string longest;
  for (const std::string& be : opt.attn) {
    int t = 0;
    for (const ProfilePoint& p : r.points)
      if (p.backend == be && p.ran) t = std::max(t, p.T);
    longest += strformat("%s%s %s", longest.empty() ? "" : ", ", be.c_str(),
                         t ? std::to_string(t).c_str() : "none");
  }
  std::fprintf(out,
               "\nsummary: %zu points on %s: %d ran (%d with measured peak within 5%% of the "
               "plan), %d OOM, %d skipped, %d errors; longest T run: %s; wrote %s, %s\n",
               r.points.size(), r.ceilings.name.c_str(), ran, within, oom, skipped, errors,
               longest.c_str(), r.csv_path.c_str(), r.json_path.c_str());
}

