import * as z from 'zod';

/** An error or warning as it travels in a payload: code, sentence, and optionally hint and path. */
export const MurmurErrorJsonSchema = z.object({
  code: z.string(),
  message: z.string(),
  hint: z.string().optional(),
  path: z.string().optional(),
});

export const MurmurWarningSchema = z.object({
  code: z.string(),
  message: z.string(),
  path: z.string().optional(),
});

/** An error as carried in a payload: its code is any string, as a reader may not know it. */
export type WireError = z.infer<typeof MurmurErrorJsonSchema>;
