package providers

import "context"

type spareKey struct{}

// AsSpareReconciler marks ctx as a create by the AutoManager's spare
// reconciler: the only caller whose elastic nodes may carry the spare tags
// (the seed: "on an elastic node those spares are the AutoManager
// reconciler's"). The Manager sets it only for its own AutoManager's
// credential.
func AsSpareReconciler(ctx context.Context) context.Context {
	return context.WithValue(ctx, spareKey{}, true)
}

// IsSpareReconciler reports whether AsSpareReconciler marked ctx.
func IsSpareReconciler(ctx context.Context) bool {
	v, _ := ctx.Value(spareKey{}).(bool)
	return v
}
