/**
 * How many delegated sessions each delegation tree has running on this executor, launches under
 * way included. A capsule allowed to spawn itself fits its own ceiling (roost's check passes), so
 * without a count a delegation tree grows until the machine is full; and a tree lives on one
 * executor (a child runs on its parent's), so one executor's count is the tree's.
 *
 * A parent takes a place before it asks roost for an approval, and gives it back when the child
 * ends or when it ends itself: the check and the taking are one step, so two children asked for at
 * once cannot both take the last place.
 */
export class DelegationTrees {
  private readonly sizes = new Map<string, number>();

  /** A place in the tree rooted at `root` for one more child; undefined when it holds `limit` already. */
  take(root: string, limit: number): (() => void) | undefined {
    const size = this.sizes.get(root) ?? 0;
    if (size >= limit) return undefined;
    this.sizes.set(root, size + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.sizes.get(root) ?? 1) - 1;
      if (left > 0) this.sizes.set(root, left);
      else this.sizes.delete(root);
    };
  }
}
