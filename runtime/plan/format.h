/*
 * format.h: the byte layout of the plan file inside its sections, which encode.c writes and
 * decode.c reads; private to runtime/plan/. plan.h has the header and the section table.
 *
 * The canonical form. Every field is little-endian, written field by field in a fixed order
 * (never a struct copy), so the bytes do not depend on the compiler, the host's endianness or
 * uninitialized padding. Fields that an item does not use (an instruction kind's unused fields,
 * mesh axes past n_axes, dimensions past a tensor's rank, the numbers a tensor's source does not
 * take, stream priorities past n_streams, the bytes after a name's NUL) are zero (attrs
 * PLAN_NONE), and the argument lists are laid out in instruction order. The encoder writes this
 * form only and the decoder accepts it only, so any file the decoder accepts encodes back to
 * the same bytes.
 *
 * Layout of each section (offsets inside the section; all sections are padded with zeros to a
 * multiple of 8 bytes, and the table's byte count includes the padding). runtime/PLAN_FORMAT.md
 * has the same tables with the meaning of every field.
 *
 *   META (200 bytes)     0 u8[32] compiler, NUL-padded; 32 u32 model name (string offset, or
 *                        PLAN_NONE); 36 u32 options (string offset or PLAN_NONE); 40 u32 world;
 *                        44 u32 n_axes; 48 u32 mesh[8]; 80 u8[8][8] axis names, NUL-padded;
 *                        144 u32 micro_batches; 148 u32 schedule; 152 u32 zero_stage; 156 u32 loss
 *                        (tensor index or PLAN_NONE); 160 f64 est_step_s; 168 f64 est_peak_bytes;
 *                        176 u32 notes (string offset or PLAN_NONE); 180 u32 0; 184 f64
 *                        model_flops; 192 f64 device_peak_flops
 *   STRINGS              0 u32 n (bytes of string data); 4 u32 0; 8 u8[n]: NUL-terminated
 *                        strings back to back (n = 0, or the last byte is NUL). A string is
 *                        referenced by the offset of its first byte in that data.
 *   TENSORS              0 u32 count; 4 u32 0; then count records of 96 bytes: 0 u32 name;
 *                        4 u8 dtype; 5 u8 kind; 6 u8 rank; 7 u8 source; 8 u32 copies; 12 u32 0;
 *                        16 i64 shape[8]; 80 f64 a; 88 f64 b (0 where the source does not use
 *                        them: plan_source_args)
 *   GROUPS               0 u32 count; 4 u32 m (member ranks of all explicit groups); then count
 *                        records of 8 bytes: u32 axes, u32 n_ranks; then u32 ranks[m], each
 *                        explicit group's members in group order
 *   RANKS                0 u32 count (= world); 4 u32 0; then u32 program[count] (coordinates
 *                        are not stored: they are the rank's mesh digits)
 *   PROGRAM k (72-byte head, then arrays)
 *                        0 u32 k; 4 u32 name; 8 u64 arena_bytes; 16 u32 n_streams;
 *                        20 u32 n_events; 24 i32 priority[8]; 56 u32 n_buffers; 60 u32 n_attrs;
 *                        64 u32 n_insns; 68 u32 n_args; 72 buffers (64 bytes each), then attrs
 *                        (184 bytes each), then insns (32 bytes each), then u32 args[n_args]
 *     buffer:  0 u32 tensor; 4 u8 dtype; 5 u8 flags (1: persist); 6 u8[2] 0; 8 u8 shard.map[8];
 *              16 u32 layer_base; 20 u32 0; 24 u64 offset; 32 u64 bytes; 40 u32 mb_slots;
 *              44 u32 layer_slots; 48 u64 mb_stride; 56 u64 layer_stride
 *     attrs:   0 f64 f[8]; 64 i64 i[8]; 128 i32 perm[8]; 160 i32 win[6]
 *     insn:    0 u8 kind; 1 u8 stream; 2 u16 code; 4 u16 nargs; 6 i16 mb_delta; 8 u32 args;
 *              12 i32 a; 16 i32 b; 20 u32 attrs; 24 f32 t_s; 28 u8 phase; 29 u8 tag
 *              (send/recv, < PLAN_MAX_TAGS); 30 i16 layer_delta
 * *
 * Doubles (floats) are stored as the u64 (u32) of their IEEE-754 bits.
 */
#ifndef PLAN_FORMAT_H
#define PLAN_FORMAT_H

#include "plan.h"

enum {
    TABLE_ENTRY_BYTES = 24,
    FIXED_SECTIONS = 5,     // META, STRINGS, TENSORS, GROUPS, RANKS
    META_BYTES = 200,
    TENSOR_BYTES = 96,
    GROUP_BYTES = 8,
    PROGRAM_HEAD_BYTES = 72,
    BUFFER_BYTES = 64,
    ATTRS_BYTES = 184,
    INSN_BYTES = 32,
};

// Which fields each instruction kind uses (the others are canonical: 0, attrs PLAN_NONE).
enum { U_STREAM = 1, U_CODE = 2, U_A = 4, U_B = 8, U_DELTA = 16, U_ATTRS = 32, U_TIME = 64, U_TAG = 128 }; // U_TIME: t_s and phase
static const uint8_t plan_insn_uses[PLAN_I_KIND_COUNT] = {
    [PLAN_I_COMPUTE] = U_STREAM | U_CODE | U_DELTA | U_ATTRS | U_TIME,
    [PLAN_I_COLL] = U_STREAM | U_CODE | U_A | U_DELTA | U_ATTRS | U_TIME, // attrs: a chunk (version 4)
    [PLAN_I_SEND] = U_STREAM | U_A | U_B | U_DELTA | U_TIME | U_TAG,
    [PLAN_I_RECV] = U_STREAM | U_A | U_B | U_DELTA | U_TIME | U_TAG,
    [PLAN_I_COPY] = U_STREAM | U_DELTA | U_TIME,
    [PLAN_I_RECORD] = U_STREAM | U_A,
    [PLAN_I_WAIT] = U_STREAM | U_A,
    [PLAN_I_LOOP] = U_CODE | U_A | U_B,
};

// Instruction `in` with the fields its kind does not use set to their canonical values and its
// arguments at args_at. in.kind must be < PLAN_I_KIND_COUNT.
static inline plan_insn plan_insn_canonical(plan_insn in, uint32_t args_at) {
    unsigned u = plan_insn_uses[in.kind];
    if (!(u & U_STREAM)) in.stream = 0;
    if (!(u & U_CODE)) in.code = 0;
    if (!(u & U_A)) in.a = 0;
    if (!(u & U_B)) in.b = 0;
    if (!(u & U_DELTA)) in.mb_delta = 0, in.layer_delta = 0;
    if (!(u & U_ATTRS)) in.attrs = PLAN_NONE;
    if (!(u & U_TIME)) in.t_s = 0, in.phase = 0;
    if (!(u & U_TAG)) in.tag = 0;
    in.args = args_at;
    return in;
}

#endif
