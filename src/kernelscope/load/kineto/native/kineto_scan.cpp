// A fast path for decoding one chunk of a Kineto event array: the chunk is validated whole by simdjson's DOM
// parser, then walked with its On-Demand API, and the fields kernelscope reads are gathered into columns.
//
// It decodes only what it can decode exactly as the msgspec path (events.py) would; anything else (a type the
// msgspec path would refuse or treat specially, integers beyond int64, duplicate keys that are read, lone
// surrogate escapes, categories that are not ASCII, nesting deeper than 256) makes scan() return None and
// events.py decodes the chunk itself. So the tables are the same either way; this path only makes the common
// case fast.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "simdjson.h"

using namespace simdjson;

namespace {

struct Bail {};  // the msgspec path decides this chunk

inline void check(error_code error) {
  if (error) throw Bail{};
}

constexpr uint32_t kNull = 0xFFFFFFFFu;
constexpr size_t kMaxDepth = 256;  // well below the msgspec path's recursion limit: deeper text goes there

// Distinct strings of a chunk, each with its code. Each is copied once (the parsers' buffers it is read from do
// not outlive the scan); a deque keeps the copies where they are, so the index can key on views of them.
struct Interned {
  std::unordered_map<std::string_view, uint32_t> index;
  std::deque<std::string> storage;
  std::vector<std::string_view> values;
  uint32_t code(std::string_view text) {
    auto hit = index.find(text);
    if (hit != index.end()) return hit->second;
    const std::string& kept = storage.emplace_back(text);
    auto code = static_cast<uint32_t>(values.size());
    values.push_back(kept);
    index.emplace(kept, code);
    return code;
  }
};

template <typename T>
struct Nullable {  // a nullable column: values, and whether each is there
  std::vector<T> values;
  std::vector<uint8_t> valid;
  void push(bool ok, T value) {
    values.push_back(ok ? value : T{});
    valid.push_back(ok ? 1 : 0);
  }
};
using Ints = Nullable<int64_t>;
using Floats = Nullable<double>;

// A process or thread id as written: an integer, null, or text (its code among the chunk's strings).
struct Ids {
  std::vector<int64_t> values;
  std::vector<uint8_t> kind;  // 0 integer, 1 null, 2 text
};

enum Category : uint8_t { kOther = 0, kKernel = 1, kRuntime = 2, kOp = 3, kUnread = 4, kPython = 5 };


struct Common {  // columns every table has
  std::vector<uint32_t> name, cat;
  Ids pid, tid;
  std::vector<double> ts, dur;
};

struct KernelArgs {
  bool external_id_ok = false, external_id_old_ok = false, correlation_ok = false, device_ok = false,
       stream_ok = false, registers_ok = false, shared_ok = false, occupancy_ok = false, bytes_ok = false,
       in_ok = false, out_ok = false, group_ok = false, grid_ok = false, block_ok = false;
  int64_t external_id = 0, external_id_old = 0, correlation = 0, device = 0, stream = 0, registers = 0,
          shared = 0, bytes = 0, in = 0, out = 0, group = 0;
  int64_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  double occupancy = 0;
  uint32_t collective = kNull, dtype = kNull, process_group = kNull;
};

struct RuntimeArgs {
  bool external_id_ok = false, external_id_old_ok = false, correlation_ok = false;
  int64_t external_id = 0, external_id_old = 0, correlation = 0;
  uint32_t kernel = kNull;
};

struct OpArgs {
  bool external_id_ok = false, external_id_old_ok = false, sequence_ok = false;
  int64_t external_id = 0, external_id_old = 0, sequence = 0;
  uint32_t dims = kNull, dims_old = kNull, types = kNull, concrete = kNull;  // codes among the raw texts
};

struct Event {
  std::string_view ph, cat, name;
  bool has_ph = false, has_cat = false, has_name = false;
  int64_t pid = 0, tid = 0;
  uint8_t pid_kind = 0, tid_kind = 0;  // defaults: 0 (the msgspec struct's default is the integer 0)
  std::string_view pid_text, tid_text;
  bool has_ts = false, ts_null = true, has_dur = false, dur_null = true;
  double ts = 0, dur = 0;
  Category code = kOther;  // known once `cat` is read
  bool code_known = false;
  // Args read where they stand (the category was known by then), or their raw text to read once it is.
  bool args_read = false, args_fit = true;
  KernelArgs kernel;
  RuntimeArgs runtime;
  OpArgs op;
  std::string_view args;  // raw; empty: absent
};

struct Chunk {
  Interned strings, raws;
  std::unordered_map<std::string, int64_t> unread;  // by the lower-case category, as events.py counts them
  int64_t event_count = 0, unusable = 0;
  int64_t malformed[3] = {0, 0, 0};  // kernels, launches, ops: args that do not fit their struct
  Common k, r, o, p;  // kernels, launches (runtime), ops, Python frames (ops without args, after the others)
  std::vector<KernelArgs> ka;
  std::vector<RuntimeArgs> ra;
  std::vector<OpArgs> oa;
};

// ---- categories (Kineto's, matched case-insensitively, as events.py does with str.lower)

bool ascii_lower(std::string_view text, std::string& out) {
  out.assign(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return true;
}

struct CategoryTable {
  std::unordered_map<std::string, Category> known;
};

Category category_of(const CategoryTable& table, std::unordered_map<std::string_view, Category>& seen,
                     std::string_view cat, std::string& lowered) {
  auto hit = seen.find(cat);
  if (hit != seen.end()) return hit->second;
  if (!ascii_lower(cat, lowered)) throw Bail{};  // str.lower of other text is not ASCII's
  auto known = table.known.find(lowered);
  Category code = known == table.known.end() ? kOther : known->second;
  seen.emplace(cat, code);
  return code;
}

// ---- values

std::string_view raw_text(ondemand::value& value) {
  std::string_view text;
  check(value.raw_json().get(text));
  // A scalar's raw token may carry the whitespace after it.
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

ondemand::json_type type_of(ondemand::value& value) {
  ondemand::json_type type;
  check(value.type().get(type));
  return type;
}

// Where a field's value stands before it is read: null (read as missing), of another JSON type than the field's
// (the args do not fit), or one to read.
enum class Field { missing, misfit, read };

Field field_of(ondemand::value& value, ondemand::json_type expected) {
  auto type = type_of(value);
  if (type == ondemand::json_type::null) return Field::missing;
  return type == expected ? Field::read : Field::misfit;
}

ondemand::number_type number_kind(ondemand::value& value) {
  ondemand::number_type kind;
  check(value.get_number_type().get(kind));
  return kind;
}

// Field kinds of a typed args struct (a null reads as missing in each). `false`: the args do not fit (the msgspec
// path counts them malformed). Numbers: int64_t takes integers only (msgspec's int), double any number (its
// float); an integer beyond what the field holds goes to the msgspec path (it keeps it, polars then nulls it).
template <typename Number>
bool read_number(ondemand::value& value, bool& ok, Number& out) {
  ok = false;
  if (auto field = field_of(value, ondemand::json_type::number); field != Field::read) return field == Field::missing;
  auto kind = number_kind(value);
  if (kind == ondemand::number_type::big_integer) throw Bail{};
  if constexpr (std::is_same_v<Number, int64_t>) {
    if (kind == ondemand::number_type::floating_point_number) return false;
    if (kind != ondemand::number_type::signed_integer) throw Bail{};
    check(value.get_int64().get(out));
  } else {
    check(value.get_double().get(out));
  }
  ok = true;
  return true;
}

bool read_int(ondemand::value& value, bool& ok, int64_t& out) { return read_number(value, ok, out); }
bool read_float(ondemand::value& value, bool& ok, double& out) { return read_number(value, ok, out); }

bool read_text(ondemand::value& value, Interned& strings, uint32_t& out) {
  out = kNull;
  if (auto field = field_of(value, ondemand::json_type::string); field != Field::read) return field == Field::missing;
  std::string_view text;
  check(value.get_string().get(text));
  out = strings.code(text);
  return true;
}

bool read_dims(ondemand::value& value, bool& ok, int64_t (&out)[3]) {
  ok = false;
  if (auto field = field_of(value, ondemand::json_type::array); field != Field::read) return field == Field::missing;
  ondemand::array items;
  check(value.get_array().get(items));
  size_t count = 0;
  bool fits = true;
  for (auto item_result : items) {
    ondemand::value item;
    check(item_result.get(item));
    bool item_ok = false;
    int64_t number = 0;
    if (!read_int(item, item_ok, number) || !item_ok) fits = false;  // keep reading: the text must be walked
    if (count < 3) out[count] = number;
    ++count;
  }
  if (!fits) return false;
  ok = count == 3;
  return true;
}

// Keys read twice in one object: the msgspec path keeps the last value; this path does not guess.
struct Seen {
  uint32_t bits = 0;
  void mark(int field) {
    if (bits & (1u << field)) throw Bail{};
    bits |= 1u << field;
  }
};

template <typename Fields>
bool read_fields(ondemand::object& object, Fields&& fields) {
  Seen seen;
  bool fits = true;
  for (auto field_result : object) {
    ondemand::field field;
    check(std::move(field_result).get(field));
    std::string_view key;
    check(field.unescaped_key().get(key));
    ondemand::value value = field.value();
    if (!fields(key, value, seen)) fits = false;  // keep reading: a key read twice must still be seen
  }
  return fits;
}

// One typed args struct from the args value itself, read where the event's category is already known (Kineto
// writes `cat` before `args`).
template <typename Source, typename Fields>
bool read_args_from(Source& source, Fields&& fields) {
  ondemand::json_type type;
  check(source.type().get(type));
  if (type != ondemand::json_type::object) return false;
  ondemand::object object;
  check(source.get_object().get(object));
  return read_fields(object, fields);
}

// ... or from its raw text, kept where the category came after the args; `parser` re-walks the text (it lies
// inside the padded input, so the padding simdjson needs is there).
template <typename Fields>
bool read_args_text(ondemand::parser& parser, std::string_view text, const char* end, Fields&& fields) {
  if (text.empty()) return true;  // absent: the struct's defaults
  ondemand::document doc;
  check(parser.iterate(text.data(), text.size(), static_cast<size_t>(end - text.data())).get(doc));
  return read_args_from(doc, fields);
}

// The fields every args struct starts with: both spellings of the External id (torch ≥ 1.10 and before), and the
// launch correlation where the struct has one. -1: `key` is none of them.
template <typename Args>
int read_ids(std::string_view key, ondemand::value& value, Seen& seen, Args& a) {
  if (key == "External id") {
    seen.mark(0);
    return read_int(value, a.external_id_ok, a.external_id);
  }
  if (key == "external id") {
    seen.mark(1);
    return read_int(value, a.external_id_old_ok, a.external_id_old);
  }
  if constexpr (!std::is_same_v<Args, OpArgs>) {
    if (key == "correlation") {
      seen.mark(2);
      return read_int(value, a.correlation_ok, a.correlation);
    }
  }
  return -1;
}

// One args struct through `read` (where the args stand, or from their text): the shared ids, then `fields`, the
// struct's own keys. Args that do not fit leave `a` as its defaults.
template <typename Args, typename Reader, typename Fields>
bool read_struct(Args& a, Reader&& read, Fields&& fields) {
  bool fits = read([&](std::string_view key, ondemand::value& value, Seen& seen) {
    if (int got = read_ids(key, value, seen, a); got >= 0) return got == 1;
    return fields(key, value, seen);
  });
  if (!fits) a = Args{};
  return fits;
}

// Fills `a` as msgspec decodes Kernel args; false: they do not fit (then `a` is left as its defaults).
template <typename Reader>
bool kernel_args(KernelArgs& a, Chunk& chunk, Reader&& read) {
  return read_struct(a, read, [&](std::string_view key, ondemand::value& value, Seen& seen) {
    if (key == "device") { seen.mark(3); return read_int(value, a.device_ok, a.device); }
    if (key == "stream") { seen.mark(4); return read_int(value, a.stream_ok, a.stream); }
    if (key == "grid") { seen.mark(5); return read_dims(value, a.grid_ok, a.grid); }
    if (key == "block") { seen.mark(6); return read_dims(value, a.block_ok, a.block); }
    if (key == "registers per thread") { seen.mark(7); return read_int(value, a.registers_ok, a.registers); }
    if (key == "shared memory") { seen.mark(8); return read_int(value, a.shared_ok, a.shared); }
    if (key == "est. achieved occupancy %") { seen.mark(9); return read_float(value, a.occupancy_ok, a.occupancy); }
    if (key == "bytes") { seen.mark(10); return read_int(value, a.bytes_ok, a.bytes); }
    if (key == "Collective name") { seen.mark(11); return read_text(value, chunk.strings, a.collective); }
    if (key == "In msg nelems") { seen.mark(12); return read_int(value, a.in_ok, a.in); }
    if (key == "Out msg nelems") { seen.mark(13); return read_int(value, a.out_ok, a.out); }
    if (key == "Group size") { seen.mark(14); return read_int(value, a.group_ok, a.group); }
    if (key == "dtype") { seen.mark(15); return read_text(value, chunk.strings, a.dtype); }
    if (key == "Process Group Name") { seen.mark(16); return read_text(value, chunk.strings, a.process_group); }
    return true;
  });
}

// Fills `a` as msgspec decodes Runtime args; false: they do not fit (then `a` is left as its defaults).
template <typename Reader>
bool runtime_args(RuntimeArgs& a, Chunk& chunk, Reader&& read) {
  return read_struct(a, read, [&](std::string_view key, ondemand::value& value, Seen& seen) {
    if (key == "kernel") { seen.mark(3); return read_text(value, chunk.strings, a.kernel); }
    return true;
  });
}

// Fills `a` as msgspec decodes Op args; false: they do not fit (then `a` is left as its defaults).
template <typename Reader>
bool op_args(OpArgs& a, Chunk& chunk, Reader&& read) {
  return read_struct(a, read, [&](std::string_view key, ondemand::value& value, Seen& seen) {
    if (key == "Sequence number") { seen.mark(2); return read_int(value, a.sequence_ok, a.sequence); }
    if (key == "Input Dims") { seen.mark(3); a.dims = chunk.raws.code(raw_text(value)); return true; }
    if (key == "Input dims") { seen.mark(4); a.dims_old = chunk.raws.code(raw_text(value)); return true; }
    if (key == "Input type") { seen.mark(5); a.types = chunk.raws.code(raw_text(value)); return true; }
    if (key == "Concrete Inputs") { seen.mark(6); a.concrete = chunk.raws.code(raw_text(value)); return true; }
    return true;
  });
}

// ---- events

struct Scan {  // what reading an event needs besides the event
  const CategoryTable& categories;
  std::unordered_map<std::string_view, Category> seen_cats;
  std::string lowered;
  Chunk& chunk;
};

Category event_category(Scan& scan, std::string_view cat) {
  Category code = category_of(scan.categories, scan.seen_cats, cat, scan.lowered);
  // Python frames are the category as written exactly (events.py); other spellings are ops with args.
  if (code == kOp && cat == "python_function") code = kPython;
  return code;
}

void read_args_here(Event& event, ondemand::value& value, Chunk& chunk) {
  auto here = [&](auto&& fields) { return read_args_from(value, fields); };
  if (event.code == kKernel) {
    event.args_fit = kernel_args(event.kernel, chunk, here);
  } else if (event.code == kRuntime) {
    event.args_fit = runtime_args(event.runtime, chunk, here);
  } else if (event.code == kOp) {
    event.args_fit = op_args(event.op, chunk, here);
  }
  event.args_read = true;  // (other categories' args are never read)
}

void read_event(ondemand::object& object, Event& event, Scan& scan) {
  Interned& strings = scan.chunk.strings;
  read_fields(object, [&](std::string_view key, ondemand::value& value, Seen& seen) {
    if (key.size() > 4) return true;
    if (key == "ph" || key == "cat" || key == "name") {
      int slot = key == "ph" ? 0 : key == "cat" ? 1 : 2;
      seen.mark(slot);
      std::string_view text;
      check(value.get_string().get(text));  // null or another type: the msgspec path refuses the chunk
      (slot == 0 ? event.ph : slot == 1 ? event.cat : event.name) = text;
      if (slot == 1) {
        event.code = event_category(scan, text);
        event.code_known = true;
      }
    } else if (key == "pid" || key == "tid") {
      bool pid = key == "pid";
      seen.mark(pid ? 3 : 4);
      int64_t& number = pid ? event.pid : event.tid;
      uint8_t& kind = pid ? event.pid_kind : event.tid_kind;
      // An integer, null or text (msgspec: int | str | None); anything else refuses the chunk there.
      auto type = type_of(value);
      if (type == ondemand::json_type::null) {
        kind = 1;
      } else if (type == ondemand::json_type::string) {
        std::string_view text;
        check(value.get_string().get(text));
        number = strings.code(text);
        kind = 2;
      } else if (type == ondemand::json_type::number && number_kind(value) == ondemand::number_type::signed_integer) {
        check(value.get_int64().get(number));
        kind = 0;
      } else {
        throw Bail{};
      }
    } else if (key == "ts" || key == "dur") {
      bool ts = key == "ts";
      seen.mark(ts ? 5 : 6);
      // A number or null (msgspec: float | None); anything else refuses the chunk there.
      bool present = false;
      if (!read_float(value, present, ts ? event.ts : event.dur)) throw Bail{};
      (ts ? event.ts_null : event.dur_null) = !present;
    } else if (key == "args") {
      seen.mark(7);
      if (event.code_known) {
        read_args_here(event, value, scan.chunk);
      } else {
        event.args = raw_text(value);
      }
    }
    return true;
  });
  if (!event.code_known) {
    event.code = event_category(scan, event.cat);
    event.code_known = true;
  }
}

bool usable(const Event& event) {
  // As events.py: |ts| within 4e15 µs, durations within 0 … 1e12 µs (a missing duration counts as 0).
  double dur = event.dur_null ? 0.0 : event.dur;
  return std::fabs(event.ts) <= 4e15 && dur >= 0 && dur <= 1e12;
}

void add_common(Common& table, const Event& event, Interned& strings) {
  table.name.push_back(strings.code(event.name));
  table.cat.push_back(strings.code(event.cat));
  table.pid.values.push_back(event.pid);
  table.pid.kind.push_back(event.pid_kind);
  table.tid.values.push_back(event.tid);
  table.tid.kind.push_back(event.tid_kind);
  table.ts.push_back(event.ts);
  table.dur.push_back(event.dur_null ? 0.0 : event.dur);
}

// Escapes of UTF-16 surrogates (\uD800 … \uDFFF): how each decoder treats a lone one differs, so such text goes
// to the msgspec path.
bool has_surrogate_escape(const char* text, size_t length) {
  const char* at = text;
  const char* end = text + length;
  while (at + 4 <= end) {
    const void* found = std::memchr(at, '\\', static_cast<size_t>(end - at));
    if (!found) return false;
    at = static_cast<const char*>(found);
    if (at + 1 < end && at[1] == '\\') {  // an escaped backslash
      at += 2;
      continue;
    }
    if (at + 3 < end && at[1] == 'u' && (at[2] == 'd' || at[2] == 'D')) {
      char c = at[3];
      if ((c >= '8' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) return true;
    }
    ++at;
  }
  return false;
}

// Buffers kept from chunk to chunk (one set per thread): fresh ones for every chunk spent a fifth of the time
// faulting their pages in. release() lets them go once a trace is read.
struct Workspace {
  std::vector<char> text;  // the chunk, with the padding simdjson reads past its end
  dom::parser validator;
  ondemand::parser parser;
  ondemand::parser args_parser;
  size_t capacity = 0;
};

thread_local std::unique_ptr<Workspace> t_workspace;

Workspace& workspace(size_t size) {
  if (!t_workspace) t_workspace = std::make_unique<Workspace>();
  Workspace& w = *t_workspace;
  if (size > w.capacity) {
    check(w.validator.allocate(size, kMaxDepth));
    check(w.parser.allocate(size, kMaxDepth));
    check(w.args_parser.allocate(size, kMaxDepth));
    w.capacity = size;
  }
  return w;
}

void scan(Workspace& w, size_t size, const CategoryTable& categories, Chunk& chunk) {
  const char* text = w.text.data();
  if (has_surrogate_escape(text, size)) throw Bail{};
  // Whole validation first: the On-Demand walk below does not look inside values it skips, and a chunk the
  // msgspec path would refuse must not be read.
  dom::element root;
  check(w.validator.parse(reinterpret_cast<const uint8_t*>(text), size, false).get(root));
  ondemand::parser& parser = w.parser;
  ondemand::parser& args_parser = w.args_parser;
  const char* end = text + size + SIMDJSON_PADDING;
  ondemand::document doc;
  check(parser.iterate(text, size, size + SIMDJSON_PADDING).get(doc));
  ondemand::array events;
  check(doc.get_array().get(events));
  Scan state{categories, {}, {}, chunk};
  std::string lowered;
  for (auto element : events) {
    ondemand::object object;
    check(element.get_object().get(object));  // not an object: the msgspec path refuses the chunk
    Event event;
    read_event(object, event, state);
    ++chunk.event_count;
    Category code = event.code;
    if (code == kOther) continue;
    if (code == kUnread) {
      ascii_lower(event.cat, lowered);
      ++chunk.unread[lowered];
      continue;
    }
    if (event.ph != "X" || event.ts_null) continue;
    if (!usable(event)) {
      ++chunk.unusable;
      continue;
    }
    // Args not read where they stood (the category came after them) are read from their text now.
    auto from_text = [&](auto&& fields) { return read_args_text(args_parser, event.args, end, fields); };
    if (code == kKernel) {
      add_common(chunk.k, event, chunk.strings);
      bool fits = event.args_read ? event.args_fit : kernel_args(event.kernel, chunk, from_text);
      chunk.malformed[0] += fits ? 0 : 1;
      chunk.ka.push_back(event.kernel);
    } else if (code == kRuntime) {
      add_common(chunk.r, event, chunk.strings);
      bool fits = event.args_read ? event.args_fit : runtime_args(event.runtime, chunk, from_text);
      chunk.malformed[1] += fits ? 0 : 1;
      chunk.ra.push_back(event.runtime);
    } else if (code == kPython) {
      add_common(chunk.p, event, chunk.strings);
    } else {
      add_common(chunk.o, event, chunk.strings);
      bool fits = event.args_read ? event.args_fit : op_args(event.op, chunk, from_text);
      chunk.malformed[2] += fits ? 0 : 1;
      chunk.oa.push_back(event.op);
    }
  }
}

// ---- to Python

PyObject* bytes_of(const void* data, size_t size) {
  return PyBytes_FromStringAndSize(static_cast<const char*>(data), static_cast<Py_ssize_t>(size));
}

template <typename T>
PyObject* column(const std::vector<T>& values) {
  return bytes_of(values.data(), values.size() * sizeof(T));
}

int put(PyObject* dict, const char* key, PyObject* value) {
  if (!value) return -1;
  int status = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return status;
}

PyObject* texts(const std::vector<std::string_view>& values) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(values.size()));
  if (!list) return nullptr;
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* text = PyUnicode_DecodeUTF8(values[i].data(), static_cast<Py_ssize_t>(values[i].size()), "strict");
    if (!text) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), text);
  }
  return list;
}

// Columns of nullable fields gathered from the args structs.
template <typename A, typename F>
int put_ints(PyObject* dict, const char* key, const std::vector<A>& args, F field) {
  Ints column_data;
  column_data.values.reserve(args.size());
  column_data.valid.reserve(args.size());
  for (const A& a : args) {
    auto [ok, value] = field(a);
    column_data.push(ok, value);
  }
  PyObject* pair = Py_BuildValue("(NN)", column(column_data.values), column(column_data.valid));
  return put(dict, key, pair);
}

template <typename A, typename F>
int put_codes(PyObject* dict, const char* key, const std::vector<A>& args, F field) {
  std::vector<uint32_t> codes;
  codes.reserve(args.size());
  for (const A& a : args) codes.push_back(field(a));
  return put(dict, key, column(codes));
}

PyObject* common_dict(const Common& table) {
  PyObject* dict = PyDict_New();
  if (!dict) return nullptr;
  if (put(dict, "name", column(table.name)) || put(dict, "cat", column(table.cat)) ||
      put(dict, "pid", Py_BuildValue("(NN)", column(table.pid.values), column(table.pid.kind))) ||
      put(dict, "tid", Py_BuildValue("(NN)", column(table.tid.values), column(table.tid.kind))) ||
      put(dict, "ts", column(table.ts)) || put(dict, "dur", column(table.dur))) {
    Py_DECREF(dict);
    return nullptr;
  }
  return dict;
}

using IntField = std::pair<bool, int64_t>;

// The id columns every args struct has (read_ids).
template <typename Args>
int put_ids(PyObject* dict, const std::vector<Args>& a) {
  int failed = put_ints(dict, "external_id", a, [](const Args& x) { return IntField{x.external_id_ok, x.external_id}; }) ||
               put_ints(dict, "external_id_old", a,
                        [](const Args& x) { return IntField{x.external_id_old_ok, x.external_id_old}; });
  if constexpr (!std::is_same_v<Args, OpArgs>) {
    failed = failed ||
             put_ints(dict, "correlation", a, [](const Args& x) { return IntField{x.correlation_ok, x.correlation}; });
  }
  return failed;
}

// A table's columns: those every table has, its ids, then `put_fields`' (nullptr, and no dict, where one fails).
template <typename Args, typename Put>
PyObject* table_dict(const Common& table, const std::vector<Args>& a, Put&& put_fields) {
  PyObject* dict = common_dict(table);
  if (!dict) return nullptr;
  if (put_ids(dict, a) || put_fields(dict)) {
    Py_DECREF(dict);
    return nullptr;
  }
  return dict;
}

PyObject* kernels_dict(const Chunk& chunk) {
  const auto& a = chunk.ka;
  return table_dict(chunk.k, a, [&](PyObject* dict) {
    Floats occupancy;
    for (const KernelArgs& x : a) occupancy.push(x.occupancy_ok, x.occupancy);
    return put_ints(dict, "device", a, [](const KernelArgs& x) { return IntField{x.device_ok, x.device}; }) ||
           put_ints(dict, "stream", a, [](const KernelArgs& x) { return IntField{x.stream_ok, x.stream}; }) ||
           put_ints(dict, "grid_x", a, [](const KernelArgs& x) { return IntField{x.grid_ok, x.grid[0]}; }) ||
           put_ints(dict, "grid_y", a, [](const KernelArgs& x) { return IntField{x.grid_ok, x.grid[1]}; }) ||
           put_ints(dict, "grid_z", a, [](const KernelArgs& x) { return IntField{x.grid_ok, x.grid[2]}; }) ||
           put_ints(dict, "block_x", a, [](const KernelArgs& x) { return IntField{x.block_ok, x.block[0]}; }) ||
           put_ints(dict, "block_y", a, [](const KernelArgs& x) { return IntField{x.block_ok, x.block[1]}; }) ||
           put_ints(dict, "block_z", a, [](const KernelArgs& x) { return IntField{x.block_ok, x.block[2]}; }) ||
           put_ints(dict, "registers_per_thread", a,
                    [](const KernelArgs& x) { return IntField{x.registers_ok, x.registers}; }) ||
           put_ints(dict, "shared_memory_bytes", a,
                    [](const KernelArgs& x) { return IntField{x.shared_ok, x.shared}; }) ||
           put_ints(dict, "bytes", a, [](const KernelArgs& x) { return IntField{x.bytes_ok, x.bytes}; }) ||
           put_ints(dict, "msg_in_elems", a, [](const KernelArgs& x) { return IntField{x.in_ok, x.in}; }) ||
           put_ints(dict, "msg_out_elems", a, [](const KernelArgs& x) { return IntField{x.out_ok, x.out}; }) ||
           put_ints(dict, "group_size", a, [](const KernelArgs& x) { return IntField{x.group_ok, x.group}; }) ||
           put_codes(dict, "collective", a, [](const KernelArgs& x) { return x.collective; }) ||
           put_codes(dict, "msg_dtype", a, [](const KernelArgs& x) { return x.dtype; }) ||
           put_codes(dict, "process_group", a, [](const KernelArgs& x) { return x.process_group; }) ||
           put(dict, "est_occupancy_pct",
               Py_BuildValue("(NN)", column(occupancy.values), column(occupancy.valid)));
  });
}

PyObject* launches_dict(const Chunk& chunk) {
  return table_dict(chunk.r, chunk.ra, [&](PyObject* dict) {
    return put_codes(dict, "kernel_name", chunk.ra, [](const RuntimeArgs& x) { return x.kernel; });
  });
}

PyObject* ops_dict(const Chunk& chunk) {
  const auto& a = chunk.oa;
  return table_dict(chunk.o, a, [&](PyObject* dict) {
    return put_ints(dict, "sequence_number", a, [](const OpArgs& x) { return IntField{x.sequence_ok, x.sequence}; }) ||
           put_codes(dict, "input_dims", a, [](const OpArgs& x) { return x.dims; }) ||
           put_codes(dict, "input_dims_old", a, [](const OpArgs& x) { return x.dims_old; }) ||
           put_codes(dict, "input_types", a, [](const OpArgs& x) { return x.types; }) ||
           put_codes(dict, "concrete_inputs", a, [](const OpArgs& x) { return x.concrete; });
  });
}

PyObject* result_of(const Chunk& chunk) {
  PyObject* result = PyDict_New();
  if (!result) return nullptr;
  PyObject* unread = PyDict_New();
  if (!unread) {
    Py_DECREF(result);
    return nullptr;
  }
  for (const auto& [cat, count] : chunk.unread) {
    PyObject* key = PyUnicode_FromStringAndSize(cat.data(), static_cast<Py_ssize_t>(cat.size()));
    PyObject* value = PyLong_FromLongLong(count);
    int status = key && value ? PyDict_SetItem(unread, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    if (status) {
      Py_DECREF(unread);
      Py_DECREF(result);
      return nullptr;
    }
  }
  if (put(result, "unread", unread) || put(result, "event_count", PyLong_FromLongLong(chunk.event_count)) ||
      put(result, "unusable", PyLong_FromLongLong(chunk.unusable)) ||
      put(result, "malformed", Py_BuildValue("(LLL)", static_cast<long long>(chunk.malformed[0]),
                                            static_cast<long long>(chunk.malformed[1]),
                                            static_cast<long long>(chunk.malformed[2]))) ||
      put(result, "strings", texts(chunk.strings.values)) || put(result, "raws", texts(chunk.raws.values)) ||
      put(result, "kernels", kernels_dict(chunk)) || put(result, "launches", launches_dict(chunk)) ||
      put(result, "ops", ops_dict(chunk)) || put(result, "python", common_dict(chunk.p))) {
    Py_DECREF(result);
    return nullptr;
  }
  return result;
}

CategoryTable* g_categories = nullptr;

PyObject* set_categories(PyObject*, PyObject* arg) {
  // {lower-case category: code} (events.py's category sets), given once by the Python side.
  if (!PyDict_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "a dict of category → code");
    return nullptr;
  }
  auto* table = new CategoryTable();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(arg, &pos, &key, &value)) {
    const char* text = PyUnicode_AsUTF8(key);
    long code = PyLong_AsLong(value);
    if (!text || code < 0 || code > 5) {
      delete table;
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "category codes are 0 … 5");
      return nullptr;
    }
    table->known[text] = static_cast<Category>(code);
  }
  delete g_categories;
  g_categories = table;
  Py_RETURN_NONE;
}

PyObject* scan_chunk(PyObject*, PyObject* args) {
  if (!g_categories) {
    PyErr_SetString(PyExc_RuntimeError, "set_categories first");
    return nullptr;
  }
  // (text, opens, closes): a chunk of the event array; `opens`/`closes`: it holds the array's own bracket, else
  // one is added (as chunks.chunk_text does). The text may be a view of the mapped trace: it is copied here,
  // with the padding simdjson reads past its end, while other threads run.
  Py_buffer view;
  int opens = 1, closes = 1;
  if (!PyArg_ParseTuple(args, "y*|pp", &view, &opens, &closes)) return nullptr;
  Chunk chunk;
  bool bailed = false;
  auto length = static_cast<size_t>(view.len);
  size_t size = length + (opens ? 0 : 1) + (closes ? 0 : 1);
  Py_BEGIN_ALLOW_THREADS
  try {
    Workspace& w = workspace(size);
    w.text.resize(size + SIMDJSON_PADDING);
    char* at = w.text.data();
    if (!opens) *at++ = '[';
    std::memcpy(at, view.buf, length);
    at += length;
    if (!closes) *at++ = ']';
    std::memset(at, 0, SIMDJSON_PADDING);
    scan(w, size, *g_categories, chunk);
  } catch (...) {  // Bail, or memory: the msgspec path decides (and reports what it must)
    bailed = true;
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (bailed) Py_RETURN_NONE;
  return result_of(chunk);
}

PyObject* release(PyObject*, PyObject*) {
  t_workspace.reset();
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"set_categories", set_categories, METH_O, "Kineto categories (lower case) and their codes."},
    {"scan", scan_chunk, METH_VARARGS, "One chunk's columns, or None where the msgspec path must decode it."},
    {"release", release, METH_NOARGS, "Let go of this thread's buffers (kept from chunk to chunk)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan", "Fast path of the Kineto chunk decoder.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kineto_scan(void) { return PyModule_Create(&module); }
