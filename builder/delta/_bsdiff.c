/*
 * bsdiff payloads in the stream format ostree's BSPATCH operation applies, made with a
 * linear-time suffix array (libdivsufsort) and the search split across threads.
 *
 * The stream (what ostree's bundled bspatch reads, with no header): repeated
 *   x, y, z  three 8-byte integers, little-endian magnitude with the sign in the top bit;
 *   x bytes  added (mod 256) to the old file from the current old position;
 *   y bytes  copied as they are;
 * after which the old position moves by x + z.  The matching follows Colin Percival's
 * bsdiff ("Naive differences of executable code", 2003): find the longest match of the new
 * file's next bytes in the old file through the suffix array, keep extending the current
 * alignment while it scores as well, and emit a control triple where the alignment changes.
 *
 * The new file is cut into segments of a fixed size, each matched against the whole old
 * file, on as many threads as asked; the segments' streams are joined by rewriting the seek
 * of each segment's last triple to where the next one starts reading. The stream depends on
 * the segment size, not on the number of threads. The suffix array is built once and
 * shared read-only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <divsufsort.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CONTROL_BYTES 24
#define MAX_THREADS 64
#define MAX_SEGMENTS 4096

typedef struct
{
  uint8_t *data;
  size_t len;
  size_t cap;
} Buffer;

static int
buffer_put (Buffer *buf, const void *src, size_t n)
{
  if (buf->len + n > buf->cap)
    {
      size_t cap = buf->cap ? buf->cap : 1 << 16;
      while (cap < buf->len + n)
        cap *= 2;
      uint8_t *grown = realloc (buf->data, cap);
      if (grown == NULL)
        return -1;
      buf->data = grown;
      buf->cap = cap;
    }
  memcpy (buf->data + buf->len, src, n);
  buf->len += n;
  return 0;
}

static void
put_offset (int64_t value, uint8_t *out)
{
  uint64_t magnitude = value < 0 ? (uint64_t)(-value) : (uint64_t)value;
  for (int i = 0; i < 8; i++)
    {
      out[i] = (uint8_t)(magnitude & 0xff);
      magnitude >>= 8;
    }
  if (value < 0)
    out[7] |= 0x80;
}

static int64_t
get_offset (const uint8_t *in)
{
  uint64_t magnitude = 0;
  for (int i = 7; i >= 0; i--)
    magnitude = (magnitude << 8) | (i == 7 ? in[i] & 0x7f : in[i]);
  return (in[7] & 0x80) ? -(int64_t)magnitude : (int64_t)magnitude;
}

static int64_t
match_length (const uint8_t *a, int64_t a_len, const uint8_t *b, int64_t b_len)
{
  int64_t n = a_len < b_len ? a_len : b_len;
  int64_t i = 0;
  while (i + 8 <= n)
    {
      uint64_t x, y;
      memcpy (&x, a + i, 8);
      memcpy (&y, b + i, 8);
      if (x != y)
        break;
      i += 8;
    }
  while (i < n && a[i] == b[i])
    i++;
  return i;
}

typedef struct
{
  const uint8_t *old;
  int64_t old_size;
  const int32_t *sa;     /* suffix array of old: old_size entries */
  const int32_t *bucket; /* 65537 entries: where the suffixes starting with each two bytes begin */
} Index;

#define BUCKETS 65536

/* bucket[k]: the index in the suffix array of the first suffix whose first two bytes are k
   (big-endian), from a count of the old file's byte pairs. The one-byte suffix (the last
   byte) sorts before every longer suffix starting with that byte. */
static int32_t *
pair_buckets (const uint8_t *old, int64_t old_size)
{
  int32_t *bucket = calloc (BUCKETS + 1, sizeof (int32_t));
  if (bucket == NULL)
    return NULL;
  for (int64_t i = 0; i + 1 < old_size; i++)
    bucket[((unsigned)old[i] << 8 | old[i + 1]) + 1]++;
  int32_t lone = old[old_size - 1];
  for (int k = 0; k < BUCKETS; k++)
    bucket[k + 1] += bucket[k];
  for (int k = 0; k <= BUCKETS; k++)
    if (k == BUCKETS || (k >> 8) >= lone)
      bucket[k]++;
  return bucket;
}

/* How suffix `at` of the old file compares with the pattern, knowing their first `known`
   bytes agree: the length of their common prefix, and whether the suffix sorts first (a
   suffix that is a prefix of the pattern counts as not first, as in bsdiff). */
static int64_t
compare_suffix (const Index *index, int64_t at, const uint8_t *pattern, int64_t pattern_len,
                int64_t known, int *suffix_first)
{
  int64_t n = index->old_size - at < pattern_len ? index->old_size - at : pattern_len;
  int64_t common = known + match_length (index->old + at + known, n - known, pattern + known,
                                         n - known);
  *suffix_first = common < n && index->old[at + common] < pattern[common];
  return common;
}

/* The longest match of new[0:new_size] among the old file's suffixes: binary search of the
   suffix array (inside the bucket of its first two bytes when that is not empty), then the
   better of the two neighbours. Suffixes between two others share with the pattern at least
   the shorter of those two's common prefixes, so comparisons start after it. */
static int64_t
longest_match (const Index *index, const uint8_t *new, int64_t new_size, int64_t *pos)
{
  int64_t lo = 0, hi = index->old_size - 1, known_lo = 0, known_hi = 0;
  if (new_size >= 2)
    {
      unsigned key = (unsigned)new[0] << 8 | new[1];
      if (index->bucket[key + 1] > index->bucket[key])
        {
          lo = index->bucket[key];
          hi = index->bucket[key + 1] - 1;
          known_lo = known_hi = 2;
        }
    }
  int first;
  while (hi - lo >= 2)
    {
      int64_t mid = lo + (hi - lo) / 2;
      int64_t known = known_lo < known_hi ? known_lo : known_hi;
      int64_t common = compare_suffix (index, index->sa[mid], new, new_size, known, &first);
      if (first)
        {
          lo = mid;
          known_lo = common;
        }
      else
        {
          hi = mid;
          known_hi = common;
        }
    }
  int64_t known = known_lo < known_hi ? known_lo : known_hi;
  int64_t len_lo = compare_suffix (index, index->sa[lo], new, new_size, known, &first);
  int64_t len_hi = lo == hi ? -1
                            : compare_suffix (index, index->sa[hi], new, new_size, known, &first);
  if (len_lo > len_hi)
    {
      *pos = index->sa[lo];
      return len_lo;
    }
  *pos = index->sa[hi];
  return len_hi;
}

typedef struct
{
  const Index *index;
  const uint8_t *new;
  int64_t start, end;    /* the segment of the new file */
  int64_t start_old_pos; /* where the patch's old position is when the segment begins */
  int64_t end_old_pos;   /* ... and after its last triple */
  size_t last_control;   /* offset of the last triple in out */
  Buffer out;
  uint8_t *scratch;
  int failed;
} Segment;

/* One control triple and its diff and extra bytes. */
static int
emit (Segment *seg, int64_t last_scan, int64_t last_pos, int64_t diff_len, int64_t extra_len,
      int64_t seek)
{
  uint8_t control[CONTROL_BYTES];
  put_offset (diff_len, control);
  put_offset (extra_len, control + 8);
  put_offset (seek, control + 16);
  seg->last_control = seg->out.len;
  if (buffer_put (&seg->out, control, sizeof control) < 0)
    return -1;
  for (int64_t i = 0; i < diff_len; i++)
    seg->scratch[i] = (uint8_t)(seg->new[last_scan + i] - seg->index->old[last_pos + i]);
  if (buffer_put (&seg->out, seg->scratch, (size_t)diff_len) < 0)
    return -1;
  return buffer_put (&seg->out, seg->new + last_scan + diff_len, (size_t)extra_len);
}

/* How far to extend the previous match forwards (len_forward) and the next one backwards
   (len_back) over the bytes between them, each keeping more than half its bytes equal,
   without the two overlapping. */
static void
split_gap (const Segment *seg, int64_t scan, int64_t pos, int64_t last_scan, int64_t last_pos,
           int64_t *len_forward, int64_t *len_back)
{
  const uint8_t *old = seg->index->old, *new = seg->new;
  int64_t old_size = seg->index->old_size;
  int64_t s = 0, best = 0, forward = 0, back = 0;
  for (int64_t i = 0; last_scan + i < scan && last_pos + i < old_size;)
    {
      if (old[last_pos + i] == new[last_scan + i])
        s++;
      i++;
      if (s * 2 - i > best * 2 - forward)
        {
          best = s;
          forward = i;
        }
    }
  if (scan < seg->end)
    {
      s = 0;
      best = 0;
      for (int64_t i = 1; scan >= last_scan + i && pos >= i; i++)
        {
          if (old[pos - i] == new[scan - i])
            s++;
          if (s * 2 - i > best * 2 - back)
            {
              best = s;
              back = i;
            }
        }
    }
  if (last_scan + forward > scan - back)
    {
      int64_t overlap = (last_scan + forward) - (scan - back);
      int64_t score = 0, best_score = 0, keep = 0;
      for (int64_t i = 0; i < overlap; i++)
        {
          if (new[last_scan + forward - overlap + i] == old[last_pos + forward - overlap + i])
            score++;
          if (new[scan - back + i] == old[pos - back + i])
            score--;
          if (score > best_score)
            {
              best_score = score;
              keep = i + 1;
            }
        }
      forward += keep - overlap;
      back -= keep;
    }
  *len_forward = forward;
  *len_back = back;
}

static void *
diff_segment (void *arg)
{
  Segment *seg = arg;
  const Index *index = seg->index;
  const uint8_t *old = index->old, *new = seg->new;
  int64_t old_size = index->old_size, end = seg->end;
  int64_t scan = seg->start, len = 0, pos = 0;
  int64_t last_scan = seg->start, last_pos = seg->start_old_pos;
  int64_t last_offset = last_pos - last_scan;

  seg->scratch = malloc ((size_t)(end - seg->start) + 1);
  if (seg->scratch == NULL)
    {
      seg->failed = 1;
      return NULL;
    }
  while (scan < end)
    {
      int64_t old_score = 0, scsc;
      for (scsc = scan += len; scan < end; scan++)
        {
          len = longest_match (index, new + scan, end - scan, &pos);
          for (; scsc < scan + len; scsc++)
            if (scsc + last_offset >= 0 && scsc + last_offset < old_size
                && old[scsc + last_offset] == new[scsc])
              old_score++;
          if ((len == old_score && len != 0) || len > old_score + 8)
            break;
          if (scan + last_offset >= 0 && scan + last_offset < old_size
              && old[scan + last_offset] == new[scan])
            old_score--;
        }
      if (len != old_score || scan == end)
        {
          int64_t forward, back;
          split_gap (seg, scan, pos, last_scan, last_pos, &forward, &back);
          if (emit (seg, last_scan, last_pos, forward, (scan - back) - (last_scan + forward),
                    (pos - back) - (last_pos + forward))
              < 0)
            {
              seg->failed = 1;
              break;
            }
          last_scan = scan - back;
          last_pos = pos - back;
          last_offset = pos - scan;
        }
    }
  seg->end_old_pos = last_pos;
  free (seg->scratch);
  seg->scratch = NULL;
  return NULL;
}

typedef struct
{
  Segment *segs;
  int count;
  int next;
  pthread_mutex_t lock;
} Queue;

static void *
work (void *arg)
{
  Queue *queue = arg;
  for (;;)
    {
      pthread_mutex_lock (&queue->lock);
      int t = queue->next < queue->count ? queue->next++ : -1;
      pthread_mutex_unlock (&queue->lock);
      if (t < 0)
        return NULL;
      diff_segment (&queue->segs[t]);
    }
}

/* Joins the segments' streams into one: the last triple of each segment seeks to where the
   next segment starts reading. */
static uint8_t *
join_segments (Segment *segs, int count, size_t *out_len)
{
  Buffer joined = { 0 };
  for (int t = 0; t < count; t++)
    {
      Segment *seg = &segs[t];
      if (seg->failed)
        {
          free (joined.data);
          return NULL;
        }
      if (t + 1 < count)
        {
          uint8_t *control = seg->out.data + seg->last_control;
          int64_t seek = get_offset (control + 16)
                         + (segs[t + 1].start_old_pos - seg->end_old_pos);
          put_offset (seek, control + 16);
        }
      if (buffer_put (&joined, seg->out.data, seg->out.len) < 0)
        {
          free (joined.data);
          return NULL;
        }
    }
  *out_len = joined.len;
  return joined.data ? joined.data : malloc (1);
}

/* The whole stream. The new file is cut into segments of segment_bytes (so the stream does
   not depend on how many threads made it); up to `threads` threads match them. Returns
   NULL when memory or a thread runs out. */
static uint8_t *
bsdiff_stream (const uint8_t *old, int64_t old_size, const uint8_t *new, int64_t new_size,
               int threads, int64_t segment_bytes, size_t *out_len)
{
  if (new_size == 0)
    {
      *out_len = 0;
      return malloc (1);
    }
  if (old_size == 0)
    {
      Buffer only = { 0 };
      uint8_t control[CONTROL_BYTES];
      put_offset (0, control);
      put_offset (new_size, control + 8);
      put_offset (0, control + 16);
      if (buffer_put (&only, control, sizeof control) < 0
          || buffer_put (&only, new, (size_t)new_size) < 0)
        {
          free (only.data);
          return NULL;
        }
      *out_len = only.len;
      return only.data;
    }
  int64_t count64 = (new_size + segment_bytes - 1) / segment_bytes;
  int count = count64 > MAX_SEGMENTS ? MAX_SEGMENTS : (int)count64;
  Segment *segs = calloc ((size_t)count, sizeof (Segment));
  int32_t *sa = malloc (sizeof (int32_t) * (size_t)old_size);
  int32_t *bucket = NULL;
  if (segs == NULL || sa == NULL || divsufsort (old, sa, (int32_t)old_size) != 0
      || (bucket = pair_buckets (old, old_size)) == NULL)
    {
      free (segs);
      free (sa);
      return NULL;
    }
  Index index = { old, old_size, sa, bucket };
  for (int t = 0; t < count; t++)
    {
      segs[t].index = &index;
      segs[t].new = new;
      segs[t].start = new_size * t / count;
      segs[t].end = new_size * (t + 1) / count;
      /* Similar files keep their layout: a segment starts reading at its own offset. */
      segs[t].start_old_pos = segs[t].start < old_size ? segs[t].start : old_size;
    }
  Queue queue = { segs, count, 0 };
  pthread_mutex_init (&queue.lock, NULL);
  if (threads > count)
    threads = count;
  if (threads > MAX_THREADS)
    threads = MAX_THREADS;
  pthread_t ids[MAX_THREADS];
  int started = 0;
  for (int t = 1; t < threads; t++)
    if (pthread_create (&ids[started], NULL, work, &queue) == 0)
      started++;
  work (&queue); /* this thread works too; with no helper it does every segment */
  for (int t = 0; t < started; t++)
    pthread_join (ids[t], NULL);
  pthread_mutex_destroy (&queue.lock);
  free (sa);
  free (bucket);
  uint8_t *joined = join_segments (segs, count, out_len);
  for (int t = 0; t < count; t++)
    free (segs[t].out.data);
  free (segs);
  return joined;
}

/* Applies a stream as ostree's bundled bspatch does, and also refuses bytes left over
   (a stream this module makes ends exactly). Returns an error message or NULL. */
static const char *
bspatch_stream (const uint8_t *old, int64_t old_size, const uint8_t *patch, int64_t patch_len,
                uint8_t *new, int64_t new_size)
{
  int64_t old_pos = 0, new_pos = 0, at = 0;
  while (new_pos < new_size)
    {
      if (patch_len - at < CONTROL_BYTES)
        return "the patch ends inside a control triple";
      int64_t diff_len = get_offset (patch + at);
      int64_t extra_len = get_offset (patch + at + 8);
      int64_t seek = get_offset (patch + at + 16);
      at += CONTROL_BYTES;
      if (diff_len < 0 || diff_len > INT_MAX || extra_len < 0 || extra_len > INT_MAX
          || new_pos + diff_len > new_size)
        return "a control triple is out of range";
      if (patch_len - at < diff_len)
        return "the patch ends inside diff bytes";
      for (int64_t i = 0; i < diff_len; i++)
        {
          uint8_t add = (old_pos + i >= 0 && old_pos + i < old_size) ? old[old_pos + i] : 0;
          new[new_pos + i] = (uint8_t)(patch[at + i] + add);
        }
      at += diff_len;
      new_pos += diff_len;
      old_pos += diff_len;
      if (new_pos + extra_len > new_size)
        return "extra bytes run past the new file";
      if (patch_len - at < extra_len)
        return "the patch ends inside extra bytes";
      memcpy (new + new_pos, patch + at, (size_t)extra_len);
      at += extra_len;
      new_pos += extra_len;
      old_pos += seek;
    }
  if (at != patch_len)
    return "bytes are left over after the new file is complete";
  return NULL;
}

static PyObject *
py_diff (PyObject *self, PyObject *args, PyObject *kwargs)
{
  static char *keywords[] = { "old", "new", "threads", "segment_bytes", NULL };
  Py_buffer old, new;
  int threads = 1;
  long long segment_bytes = 16 << 20;
  if (!PyArg_ParseTupleAndKeywords (args, kwargs, "y*y*|iL", keywords, &old, &new, &threads,
                                    &segment_bytes))
    return NULL;
  if (threads < 1 || segment_bytes < 1)
    {
      PyBuffer_Release (&old);
      PyBuffer_Release (&new);
      PyErr_SetString (PyExc_ValueError, "bsdiff: threads and segment_bytes must be positive");
      return NULL;
    }
  if (old.len > INT32_MAX - 1 || new.len > INT32_MAX - 1)
    {
      PyBuffer_Release (&old);
      PyBuffer_Release (&new);
      PyErr_SetString (PyExc_ValueError, "bsdiff: files of 2 GiB or more are not supported");
      return NULL;
    }
  size_t out_len = 0;
  uint8_t *out;
  Py_BEGIN_ALLOW_THREADS out = bsdiff_stream (old.buf, old.len, new.buf, new.len, threads,
                                              segment_bytes, &out_len);
  Py_END_ALLOW_THREADS PyBuffer_Release (&old);
  PyBuffer_Release (&new);
  if (out == NULL)
    return PyErr_NoMemory ();
  PyObject *result = PyBytes_FromStringAndSize ((const char *)out, (Py_ssize_t)out_len);
  free (out);
  return result;
}

static PyObject *
py_patch (PyObject *self, PyObject *args)
{
  Py_buffer old, patch;
  Py_ssize_t new_size;
  if (!PyArg_ParseTuple (args, "y*y*n", &old, &patch, &new_size))
    return NULL;
  PyObject *result = new_size >= 0 ? PyBytes_FromStringAndSize (NULL, new_size) : NULL;
  if (result == NULL)
    {
      PyBuffer_Release (&old);
      PyBuffer_Release (&patch);
      if (!PyErr_Occurred ())
        PyErr_SetString (PyExc_ValueError, "bspatch: negative size");
      return NULL;
    }
  uint8_t *dest = (uint8_t *)PyBytes_AS_STRING (result);
  const char *problem;
  Py_BEGIN_ALLOW_THREADS problem = bspatch_stream (old.buf, old.len, patch.buf, patch.len, dest,
                                                   new_size);
  Py_END_ALLOW_THREADS PyBuffer_Release (&old);
  PyBuffer_Release (&patch);
  if (problem != NULL)
    {
      Py_DECREF (result);
      PyErr_Format (PyExc_ValueError, "bspatch: %s", problem);
      return NULL;
    }
  return result;
}

static PyMethodDef methods[] = {
  { "diff", (PyCFunction)(void (*) (void))py_diff, METH_VARARGS | METH_KEYWORDS,
    "diff(old, new, threads=1, segment_bytes=16 MiB) -> bytes: the bsdiff stream ostree's "
    "BSPATCH applies" },
  { "patch", py_patch, METH_VARARGS,
    "patch(old, stream, new_size) -> bytes: apply a stream as ostree's bspatch does" },
  { NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
  PyModuleDef_HEAD_INIT, "_bsdiff", "bsdiff streams for ostree static deltas", -1, methods,
};

PyMODINIT_FUNC
PyInit__bsdiff (void)
{
  return PyModule_Create (&module);
}
