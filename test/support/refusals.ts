import { MurmurError } from '@murmur/shared';

/** The MurmurError `run` throws; fails the test if it throws anything else or nothing. */
export function refusalOf(run: () => unknown): MurmurError {
  try {
    run();
  } catch (error) {
    if (error instanceof MurmurError) return error;
    throw error;
  }
  throw new Error('expected a refusal (a MurmurError), but nothing was thrown');
}

/** The MurmurError `promise` rejects with; fails the test if it rejects with anything else or resolves. */
export async function rejectionOf(promise: Promise<unknown>): Promise<MurmurError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof MurmurError) return error;
    throw error;
  }
  throw new Error('expected a refusal (a MurmurError), but the promise resolved');
}
